package consumer_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/consumer"
	"github.com/warrenmq/warren/dlq"
	"github.com/warrenmq/warren/internal/testenv"
)

// A transient failure goes through a retry tier back to this consumer's
// queue only, with the attempt count in a header; a second consumer on the
// same exchange never sees the retry.
func TestTransientFailureRetriesToThisQueueOnly(t *testing.T) {
	t.Parallel()
	exchange := testenv.Name(t, "ex")
	retrying := newRecorder()
	var headerOnRetry any
	var mu sync.Mutex
	a := newConsumer(t, func(cfg *consumer.Config) {
		cfg.Exchange = exchange
		cfg.RetryDelays = []time.Duration{100 * time.Millisecond, time.Minute}
	})
	a.HandleFunc("", func(ctx context.Context, m *warren.Message) error {
		retrying.record(m)
		if m.Event.ID != "flaky" {
			return nil
		}
		if m.Attempt == 1 {
			return errBoom
		}
		mu.Lock()
		headerOnRetry = m.Headers[dlq.HeaderAttempts]
		mu.Unlock()
		return nil
	})
	other := newRecorder()
	b := newConsumer(t, func(cfg *consumer.Config) { cfg.Exchange = exchange })
	b.HandleFunc("", func(ctx context.Context, m *warren.Message) error {
		other.record(m)
		return nil
	})
	start(t, a)
	start(t, b)

	pub := newPublisher(t)
	pub.events(exchange, "", event("flaky", "workitem.updated"))
	// Done counts after the second attempt's handler returned, which has
	// recorded its header by then; before the sentinel only flaky's
	// second attempt can make it 1.
	testenv.WaitFor(t, 60*time.Second, "the second attempt done", func() bool { return retrying.count("flaky") == 2 && a.Stats().Done >= 1 })
	// B's queue is FIFO: once B has the sentinel published after the retry,
	// a retry routed through the exchange would have reached B already.
	pub.events(exchange, "", event("sentinel", "workitem.updated"))
	other.waitDistinct(t, 2, 60*time.Second)

	if got := other.count("flaky"); got != 1 {
		t.Errorf("the other consumer saw the event %d times, want 1", got)
	}
	retrying.mu.Lock()
	got := retrying.attempts["flaky"]
	retrying.mu.Unlock()
	if len(got) != 2 || got[0] != 1 || got[1] != 2 {
		t.Errorf("attempts seen = %v, want [1 2]", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if headerOnRetry != int32(1) {
		t.Errorf("%s on the retry = %#v, want int32(1)", dlq.HeaderAttempts, headerOnRetry)
	}
	if s := a.Stats(); s.Retried != 1 || s.Done < 1 {
		t.Errorf("stats %+v, want the one retry and a success", s)
	}
}

// RabbitMQ expires messages only at the head of a queue; with one retry
// queue a 1s retry would wait behind a 60s one. With a queue per delay it
// does not.
func TestShortRetryIsNotHeldBehindLongRetry(t *testing.T) {
	// Serial: asserts the retry's delay falls within a time window.
	type seen struct {
		attempt int
		at      time.Time
	}
	var mu sync.Mutex
	log := map[string][]seen{}
	changed := make(chan struct{}, 1)
	c := newConsumer(t, func(cfg *consumer.Config) {
		cfg.RetryDelays = []time.Duration{time.Second, time.Minute}
	})
	c.HandleFunc("", func(ctx context.Context, m *warren.Message) error {
		mu.Lock()
		log[m.Event.ID] = append(log[m.Event.ID], seen{m.Attempt, time.Now()})
		mu.Unlock()
		select {
		case changed <- struct{}{}:
		default:
		}
		switch {
		case m.Event.ID == "slow":
			return warren.RetryAfter(time.Minute, errBoom)
		case m.Attempt == 1:
			return errBoom
		}
		return nil
	})
	start(t, c)
	pub := newPublisher(t)
	pub.events(c.Topology().Exchange, "", event("slow", "workitem.updated"))
	testenv.WaitFor(t, 60*time.Second, "the slow event's first attempt", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(log["slow"]) == 1
	})
	pub.events(c.Topology().Exchange, "", event("fast", "workitem.updated"))
	testenv.WaitFor(t, 60*time.Second, "the fast event's retry", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(log["fast"]) == 2
	})
	mu.Lock()
	defer mu.Unlock()
	wait := log["fast"][1].at.Sub(log["fast"][0].at)
	// Well under the 60s tier: it did not wait behind the slow event.
	if wait < time.Second || wait > 30*time.Second {
		t.Errorf("the 1s retry came back after %v", wait)
	}
	if len(log["slow"]) != 1 {
		t.Errorf("the 60s retry came back already: %v", log["slow"])
	}
	ch := testenv.Channel(t)
	if depth := testenv.QueueDepth(t, ch, c.Topology().Retry[1].Queue); depth != 1 {
		t.Errorf("the 1m tier holds %d messages, want the slow one", depth)
	}
}

// A deferral (another worker holds the lease) comes back without spending
// an attempt.
func TestDeferDoesNotSpendAnAttempt(t *testing.T) {
	t.Parallel()
	rec := newRecorder()
	c := newConsumer(t, func(cfg *consumer.Config) {
		cfg.RetryDelays = []time.Duration{50 * time.Millisecond}
		cfg.MaxAttempts = 1
	})
	c.HandleFunc("", func(ctx context.Context, m *warren.Message) error {
		rec.record(m)
		if rec.count(m.Event.ID) < 3 {
			return warren.Defer(0, "busy elsewhere")
		}
		return nil
	})
	start(t, c)
	newPublisher(t).events(c.Topology().Exchange, "", event("busy", "workitem.updated"))
	testenv.WaitFor(t, 60*time.Second, "the third delivery", func() bool { return rec.count("busy") == 3 })
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if got := rec.attempts["busy"]; got[0] != 1 || got[1] != 1 || got[2] != 1 {
		t.Errorf("attempts = %v, want [1 1 1]: deferrals must not count", got)
	}
	testenv.WaitFor(t, 60*time.Second, "both deferrals to be counted", func() bool { return c.Stats().Deferred >= 2 })
	if s := c.Stats(); s.Deferred != 2 || s.DeadLettered != 0 {
		t.Errorf("stats %+v, want 2 deferred and nothing dead", s)
	}
}
