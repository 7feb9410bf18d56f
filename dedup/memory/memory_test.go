package memory_test

import (
	"testing"
	"time"

	"github.com/warrenmq/warren/dedup"
	"github.com/warrenmq/warren/dedup/deduptest"
	"github.com/warrenmq/warren/dedup/memory"
)

func TestConformance(t *testing.T) {
	// Serial: its lease and retention subtests need the store to answer
	// within deduptest's 300 ms shortLease and shortRetention.
	deduptest.Run(t, func(t *testing.T, retention time.Duration) dedup.Store {
		s, err := memory.New(memory.Config{Retention: retention})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

func TestNewRejectsNegativeRetention(t *testing.T) {
	t.Parallel()
	if s, err := memory.New(memory.Config{Retention: -time.Second}); err == nil || s != nil {
		t.Errorf("New with a negative retention = %v, %v; want an error", s, err)
	}
}
