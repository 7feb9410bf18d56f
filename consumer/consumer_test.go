package consumer_test

import (
	"context"
	"testing"
	"time"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/consumer"
	"github.com/warrenmq/warren/internal/testenv"
)

// Both queue types must pass the same happy path.
var queueTypes = []consumer.QueueType{consumer.Classic, consumer.Quorum}

func TestEveryMessageHandledOnceAndAcked(t *testing.T) {
	t.Parallel()
	for _, qt := range queueTypes {
		t.Run(string(qt), func(t *testing.T) {
			t.Parallel()
			const n = 3000
			rec := newRecorder()
			c := newConsumer(t, func(cfg *consumer.Config) { cfg.QueueType = qt; cfg.Workers = 16 })
			c.HandleFunc("workitem.", func(ctx context.Context, m *warren.Message) error {
				rec.record(m)
				return nil
			})
			stop := start(t, c)
			newPublisher(t).events(c.Topology().Exchange, "", manyEvents(n, "ev", "workitem.updated")...)
			rec.waitDistinct(t, n, 60*time.Second)
			if err := stop(); err != nil {
				t.Fatalf("Run: %v", err)
			}
			for id, calls := range rec.calls {
				if calls != 1 {
					t.Errorf("%s handled %d times", id, calls)
				}
			}
			ch := testenv.Channel(t)
			for _, q := range c.Topology().Queues() {
				if depth := testenv.QueueDepth(t, ch, q); depth != 0 {
					t.Errorf("queue %s holds %d messages after the run", q, depth)
				}
			}
			if s := c.Stats(); s.Done != n || s.Received != n || s.InFlight != 0 {
				t.Errorf("stats %+v, want %d received and done", s, n)
			}
		})
	}
}
