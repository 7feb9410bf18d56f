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
		return memory.New(memory.Config{Retention: retention})
	})
}

func TestNewRejectsNegativeRetention(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("New with a negative retention did not panic")
		}
	}()
	memory.New(memory.Config{Retention: -time.Second})
}
