package consumertest

import (
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"
	"unicode"
)

// Space returns a name that no other run of any test has used: the
// test's name and a random suffix, letters, digits, '-' and '_' only, and
// ending in ':'. A dedup store outlives a test run: with a real one (Redis,
// Postgres) an event delivered in one run is a duplicate in the next, so a
// test that passes once fails under -count=2. Give the store a space of its
// own for each run, and a repeat run starts empty:
//
//	store, _ := redis.New(client, redis.Config{Prefix: consumertest.Space(t)})
//
// The store's retention still applies to the keys a run leaves; a test that
// should leave none deletes its space's keys when it ends (t.Cleanup). A
// memory store (dedup/memory) is new in each run and needs no space.
func Space(t testing.TB) string {
	t.Helper()
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatalf("consumertest.Space: %v", err)
	}
	name := strings.Map(func(r rune) rune {
		if r < unicode.MaxASCII && (unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_') {
			return r
		}
		return '_'
	}, t.Name())
	if len(name) > 80 {
		name = name[:80]
	}
	return "warren-test:" + name + ":" + hex.EncodeToString(b[:]) + ":"
}
