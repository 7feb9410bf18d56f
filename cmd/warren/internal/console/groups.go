package console

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"time"

	"github.com/warrenmq/warren/dlq"
	"github.com/warrenmq/warren/dlqtool"
	"github.com/warrenmq/warren/internal/redact"
)

// group is the dead messages that share a failure signature.
type group struct {
	ID        string // short and URL-safe, from the signature
	Signature string
	Shown     string // the signature as pages show it: see shownSignature
	Class     dlq.Class
	Count     int
	// First and Last are the oldest and newest last-failure times.
	First, Last time.Time
	// Types are the event types seen, most frequent first.
	Types []string
	// Example is the error text of the group's newest message, masked.
	Example string

	Messages []read

	types map[string]int
}

// groupID names a signature in URLs: signatures are long and hold any
// character.
func groupID(signature string) string {
	sum := sha256.Sum256([]byte(signature))
	return hex.EncodeToString(sum[:16]) // 128 bits: no producer can make two signatures share one
}

// signature is a group's failure signature, and as pages show it.
type signature struct{ value, shown string }

// shownSignature is m's failure signature with its secrets masked. The
// error is masked before it is normalised: masking the signature instead
// would miss part of a secret that normalising cut up
// ("password=sw0rdfish" becomes "password=sw<n>rdfish").
func shownSignature(m *dlqtool.Message) string {
	return redact.Secrets(dlq.Signature(m.Metadata.Class, redact.Secrets(m.Metadata.Error)))
}

// groupMessages groups msgs by failure signature, largest group first.
func groupMessages(msgs []read) []*group {
	bySig := map[string]*group{}
	var out []*group
	for _, m := range msgs {
		sig := m.Signature()
		g := bySig[sig]
		if g == nil {
			g = &group{ID: groupID(sig), Signature: sig, Shown: shownSignature(&m.Message), Class: m.Metadata.Class, types: map[string]int{}}
			bySig[sig] = g
			out = append(out, g)
		}
		g.Count++
		g.Messages = append(g.Messages, m)
		g.types[cmp.Or(shownText(m.EventType), "(none)")]++
		died := m.Metadata.LastFailure
		if g.First.IsZero() || (!died.IsZero() && died.Before(g.First)) {
			g.First = died
		}
		if g.Example == "" || !died.Before(g.Last) {
			g.Last, g.Example = died, shownText(m.Metadata.Error)
		}
	}
	for _, g := range out {
		g.Types = sortedCounts(g.types)
	}
	slices.SortStableFunc(out, func(a, b *group) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Signature, b.Signature))
	})
	return out
}
