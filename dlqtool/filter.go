package dlqtool

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/warrenmq/warren/dlq"
)

// ErrBadFilter is wrapped by the error for a [Filter] that cannot be used.
var ErrBadFilter = errors.New("invalid filter")

// ParseClass returns the [dlq.Class] called s, or an error wrapping [ErrBadFilter]
// that lists the valid names.
func ParseClass(s string) (dlq.Class, error) {
	c := dlq.Class(strings.ToLower(strings.TrimSpace(s)))
	if slices.Contains(dlq.Classes, c) {
		return c, nil
	}
	names := make([]string, len(dlq.Classes))
	for i, c := range dlq.Classes {
		names[i] = string(c)
	}
	return "", fmt.Errorf("%w: unknown error class %q (want one of %s)", ErrBadFilter, s, strings.Join(names, ", "))
}

// Filter selects dead messages. A message matches when it passes every
// criterion that is set; within a list, any one entry is enough. The zero
// Filter matches everything.
type Filter struct {
	// TypePrefixes selects messages whose event type starts with one of
	// these, e.g. "workitem." for every work-item event.
	TypePrefixes []string
	// Classes selects messages dead for one of these reasons.
	Classes []dlq.Class
	// ErrorContains selects messages whose error text contains this
	// substring (case-sensitive).
	ErrorContains string
	// OlderThan selects messages whose last failure is at least this long
	// ago, NewerThan those whose last failure is less than this long ago.
	// A message with no recorded failure time has no age and matches
	// neither.
	OlderThan, NewerThan time.Duration
	// EventIDs selects messages with one of these event ids: the
	// message_id property or the body's event_id, which differ when a
	// client sets a message_id of its own.
	EventIDs []string
	// Signatures selects messages whose failure signature
	// ([dlq.Signature] of their class and error text) is one of these:
	// one group of `warren dlq stats` or the console, whatever ids and
	// numbers its error texts hold.
	Signatures []string
	// Fingerprints selects exactly these messages, by
	// [Message.Fingerprint]: what a dry run showed an operator, so that
	// the action confirmed next touches those and nothing that arrived or
	// changed since. A replay, purge or export takes a message listed n
	// times (identical copies) at most n times; a message that matches
	// every other criterion but is not listed, or is listed fewer times,
	// is left in place and counted in [Progress].Unlisted.
	Fingerprints []string
}

// IsZero reports whether f selects every message.
func (f Filter) IsZero() bool {
	return len(f.TypePrefixes) == 0 && len(f.Classes) == 0 && f.ErrorContains == "" &&
		f.OlderThan == 0 && f.NewerThan == 0 && len(f.EventIDs) == 0 && len(f.Signatures) == 0 &&
		len(f.Fingerprints) == 0
}

// Validate returns an error wrapping [ErrBadFilter] when f is
// self-contradictory or names an unknown class.
func (f Filter) Validate() error {
	for _, c := range f.Classes {
		if !slices.Contains(dlq.Classes, c) {
			_, err := ParseClass(string(c))
			if err == nil { // right name, wrong case: Match compares exactly
				err = fmt.Errorf("%w: error class %q must be lower case", ErrBadFilter, c)
			}
			return err
		}
	}
	switch {
	case f.OlderThan < 0 || f.NewerThan < 0:
		return fmt.Errorf("%w: ages must not be negative", ErrBadFilter)
	case f.OlderThan > 0 && f.NewerThan > 0 && f.NewerThan <= f.OlderThan:
		return fmt.Errorf("%w: no message is older than %v and newer than %v", ErrBadFilter, f.OlderThan, f.NewerThan)
	}
	return nil
}

// Match reports whether m passes f, measuring ages from now. A message
// passes Fingerprints when it is listed at all; an action also counts
// how many times (see [Filter].Fingerprints).
func (f Filter) Match(m *Message, now time.Time) bool {
	return f.matchCriteria(m, now) && (len(f.Fingerprints) == 0 || slices.Contains(f.Fingerprints, m.Fingerprint()))
}

// matchCriteria is Match but for Fingerprints.
func (f Filter) matchCriteria(m *Message, now time.Time) bool {
	if len(f.TypePrefixes) > 0 && !slices.ContainsFunc(f.TypePrefixes, func(p string) bool { return strings.HasPrefix(m.EventType, p) }) {
		return false
	}
	if len(f.Classes) > 0 && !slices.Contains(f.Classes, m.Metadata.Class) {
		return false
	}
	if f.ErrorContains != "" && !strings.Contains(m.Metadata.Error, f.ErrorContains) {
		return false
	}
	if len(f.EventIDs) > 0 && !m.hasEventID(f.EventIDs) {
		return false
	}
	if len(f.Signatures) > 0 && !slices.Contains(f.Signatures, m.Signature()) {
		return false
	}
	if f.OlderThan > 0 || f.NewerThan > 0 {
		died := m.Metadata.LastFailure
		if died.IsZero() {
			return false
		}
		age := now.Sub(died)
		if f.OlderThan > 0 && age < f.OlderThan {
			return false
		}
		if f.NewerThan > 0 && age >= f.NewerThan {
			return false
		}
	}
	return true
}

// selector applies a Filter for one replay, purge or export: each message
// listed in Fingerprints is taken as many times as it is listed.
type selector struct {
	f    Filter
	now  time.Time
	left map[string]int // fingerprints not yet taken; nil when none are listed
}

func (f Filter) selector(now time.Time) *selector {
	s := &selector{f: f, now: now}
	if len(f.Fingerprints) > 0 {
		s.left = make(map[string]int, len(f.Fingerprints))
		for _, fp := range f.Fingerprints {
			s.left[fp]++
		}
	}
	return s
}

// take reports whether m is selected, and counts it taken. A message that
// passes every criterion but is not (or no longer) listed is counted in
// p.Unlisted.
func (s *selector) take(m *Message, p *Progress) bool {
	if !s.f.matchCriteria(m, s.now) {
		return false
	}
	if s.left == nil {
		return true
	}
	fp := m.Fingerprint()
	if s.left[fp] == 0 {
		p.Unlisted++
		return false
	}
	s.left[fp]--
	return true
}
