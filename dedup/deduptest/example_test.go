package deduptest_test

import (
	"testing"
	"time"

	"github.com/warrenmq/warren/dedup"
	"github.com/warrenmq/warren/dedup/deduptest"
	"github.com/warrenmq/warren/dedup/memory"
)

// A store's conformance test is one call; put it in a TestXxx function of
// the store's package and construct your store where memory.New stands.
func ExampleRun() {
	_ = func(t *testing.T) {
		deduptest.Run(t, func(t *testing.T, retention time.Duration) dedup.Store {
			s, err := memory.New(memory.Config{Retention: retention})
			if err != nil {
				t.Fatal(err)
			}
			return s
		})
	}
}
