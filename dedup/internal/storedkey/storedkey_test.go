package storedkey

import (
	"strings"
	"testing"
)

// Keys up to MaxLen keep their exact form (the data already in a store
// depends on it); longer ones become a digest of fixed length that depends
// on every byte.
func TestBounded(t *testing.T) {
	t.Parallel()
	atLimit := strings.Repeat("k", MaxLen)
	if got := Bounded(atLimit); got != atLimit {
		t.Errorf("Bounded of a %d-byte key changed it", MaxLen)
	}
	over, overToo := atLimit+"a", atLimit+"b"
	got := Bounded(over)
	if !strings.HasPrefix(got, "sha256:") || len(got) != len("sha256:")+64 {
		t.Errorf("Bounded of a %d-byte key = %q, want sha256: and 64 hex digits", len(over), got)
	}
	if got == Bounded(overToo) {
		t.Error("two long keys differing in their last byte share a stored key")
	}
}
