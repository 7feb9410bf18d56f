package consumer_test

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/consumer"
	"github.com/warrenmq/warren/dedup"
	"github.com/warrenmq/warren/dedup/memory"
	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/middleware"
)

// claimCounter is a dedup store that counts the claims made of it.
type claimCounter struct {
	dedup.Store
	claims atomic.Int64
}

func (c *claimCounter) Claim(ctx context.Context, key string, lease time.Duration) (dedup.Claim, error) {
	c.claims.Add(1)
	return c.Store.Claim(ctx, key, lease)
}

// A handler registered for a mistyped prefix (orders. for order.*) acks
// every event as skipped. Such events pass no middleware, so the dedup
// store gets no claim and keeps no key for them, and the consumer says so:
// one warning per event type, naming the prefixes it handles, and a count
// in Stats.
func TestEventsNoHandlerTakesSkipDedupAndAreReported(t *testing.T) {
	t.Parallel()
	logs := &logLines{}
	logger := slog.New(slog.NewTextHandler(logs, nil))
	c := newConsumer(t, func(cfg *consumer.Config) { cfg.Logger = logger })
	mem, err := memory.New(memory.Config{})
	if err != nil {
		t.Fatal(err)
	}
	store := &claimCounter{Store: mem}
	c.Use(middleware.Dedup(store, middleware.DedupOptions{}))
	c.HandleFunc("orders.", func(context.Context, *warren.Message) error { return nil })
	start(t, c)

	p := newPublisher(t)
	exchange := c.Config().Exchange
	p.events(exchange, "order.created", event(testenv.Name(t, "u1"), "order.created"), event(testenv.Name(t, "u2"), "order.created"))
	p.events(exchange, "orders.created", event(testenv.Name(t, "r1"), "orders.created"))
	testenv.WaitFor(t, time.Minute, "two skips and one done", func() bool {
		s := c.Stats()
		return s.Skipped == 2 && s.Done == 1
	})
	if s := c.Stats(); s.Unrouted != 2 {
		t.Errorf("Stats.Unrouted %d, want 2", s.Unrouted)
	}
	if n := store.claims.Load(); n != 1 {
		t.Errorf("the dedup store got %d claims, want 1: only the event a handler takes", n)
	}
	var warnings []string
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "no handler takes") {
			warnings = append(warnings, line)
		}
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], "level=WARN") || !strings.Contains(warnings[0], "event_type=order.created") ||
		!strings.Contains(warnings[0], "orders.") {
		t.Errorf("want one warning naming order.created and the handled prefix orders.; got %q\nlog:\n%s", warnings, logs)
	}
}
