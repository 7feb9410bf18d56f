package memory_test

import (
	"testing"
	"time"

	"github.com/warrenmq/warren/dedup"
	"github.com/warrenmq/warren/dedup/deduptest"
	"github.com/warrenmq/warren/dedup/memory"
)

func TestConformance(t *testing.T) {
	deduptest.Run(t, func(t *testing.T, retention time.Duration) dedup.Store {
		s, err := memory.New(memory.Config{Retention: retention})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

func TestNewRejectsNegativeRetention(t *testing.T) {
	if s, err := memory.New(memory.Config{Retention: -time.Second}); err == nil || s != nil {
		t.Errorf("New with a negative retention = %v, %v; want an error", s, err)
	}
}
