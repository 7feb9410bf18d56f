package testenv

import (
	"testing"

	"github.com/warrenmq/warren/dedup/memory"
)

// MemoryStore returns an empty in-memory dedup store with the default
// retention.
func MemoryStore(t testing.TB) *memory.Store {
	t.Helper()
	s, err := memory.New(memory.Config{})
	if err != nil {
		t.Fatalf("dedup/memory: %v", err)
	}
	return s
}
