package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/consumer"
	"github.com/warrenmq/warren/internal/testenv"
)

// A partition being released (a replica joined) is handed on whatever its
// event in flight does: a retry or a deferral waiting in place ends at
// once, a handler still running is cancelled after ShutdownGrace. The
// event is not lost: unacked, it returns to the head of the partition's
// queue and the next replica handles it.
func TestPartitionReleaseWhileHeldInPlace(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		hold func(ctx context.Context) error // what a's handler does with partition 1's event
	}{
		{"retried", func(context.Context) error { return errors.New("transient, every time") }},
		{"deferred", func(context.Context) error { return warren.Defer(time.Minute, "not yet, every time") }},
		{"running", func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a := newConsumer(t, func(cfg *consumer.Config) {
				cfg.Partitions = 2
				// Without the release's bound, each of these holds the
				// partition without end: the in-place wait (capped at
				// 30s) comes round again and again, never spending the
				// attempts, and the running handler's context lives as
				// long as the session.
				cfg.MaxAttempts = 1000
				cfg.RetryDelays = []time.Duration{time.Minute}
				cfg.ShutdownGrace = time.Second
			})
			topo := a.Topology()
			var mu sync.Mutex
			var held string // the event a holds on partition 1
			a.HandleFunc("", func(ctx context.Context, m *warren.Message) error {
				if m.Queue != topo.PartitionQueues[1] {
					return nil
				}
				mu.Lock()
				held = m.Event.ID
				mu.Unlock()
				return tc.hold(ctx)
			})
			start(t, a)
			// Entities on both partitions: a becomes active on both, and
			// holds partition 1 at its first event.
			var evs []warren.Event
			for i := range 20 {
				evs = append(evs, seqEvent(fmt.Sprintf("held-%d", i), 1))
			}
			publishInOrder(t, topo.Exchange, publishingsOf(t, evs...))
			testenv.WaitFor(t, 30*time.Second, "a active on both partitions, holding partition 1", func() bool {
				s := a.Stats()
				mu.Lock()
				defer mu.Unlock()
				return s.ActivePartitions == 2 && held != "" && (tc.name == "running" || s.Retried+s.Deferred > 0)
			})

			// b joins: a's fair share is one partition, and it releases
			// partition 1 (the highest index) while holding its event.
			cfg := a.Config()
			b := consumerAt(t, cfg.URL, func(c2 *consumer.Config) { *c2 = cfg })
			handled := make(chan string, len(evs))
			b.HandleFunc("", func(ctx context.Context, m *warren.Message) error {
				handled <- m.Event.ID
				return nil
			})
			start(t, b)
			testenv.WaitFor(t, 45*time.Second, "a released partition 1", func() bool { return a.Stats().PartitionsReleased >= 1 })
			mu.Lock()
			want := held
			mu.Unlock()
			deadline := time.After(30 * time.Second)
			for got := ""; got != want; {
				select {
				case got = <-handled:
				case <-deadline:
					t.Fatalf("b never handled %s, the event a held when it released partition 1", want)
				}
			}
		})
	}
}
