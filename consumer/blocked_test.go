package consumer_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/consumer"
	"github.com/warrenmq/warren/internal/amqpx"
	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/internal/testenv/localrabbit"
)

// blockObserved is an Observer that also implements
// consumer.BlockObserver.
type blockObserved struct {
	observed
	mu        sync.Mutex
	blocked   []string // reasons
	unblocked int
}

var _ consumer.BlockObserver = (*blockObserved)(nil)

func (o *blockObserved) Blocked(_, reason string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.blocked = append(o.blocked, reason)
}

func (o *blockObserved) Unblocked(string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.unblocked++
}

func (o *blockObserved) counts() (blocked, unblocked int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.blocked), o.unblocked
}

// A broker under a memory alarm blocks the consumer's connection when it
// publishes a retry, and stops reading it until the alarm lifts. The
// consumer must say so: a log line, Health (not ready, still alive),
// Stats and the Observer, and clear it when the broker unblocks it. The
// alarm is raised on a private node.
func testBlockedConnectionIsReported(t *testing.T) {
	node := localrabbit.Shared(t)
	obs := &blockObserved{}
	c := newNodeConsumer(t, node, func(cfg *consumer.Config) { cfg.Observer = obs })
	conn, err := amqpx.Dial(context.Background(), node.URL(), amqpx.DialOptions{Name: t.Name()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { amqpx.CloseConnection(conn, 5*time.Second) })

	// The handler fails once, when the test says so: its retry is the
	// publish that the broker blocks.
	fail := make(chan struct{})
	var once sync.Once
	c.HandleFunc("", func(ctx context.Context, m *warren.Message) error {
		failed := false
		once.Do(func() {
			<-fail
			failed = true
		})
		if failed {
			return errors.New("transient")
		}
		return nil
	})
	start(t, c)
	srv := httptest.NewServer(c.HealthHandler())
	t.Cleanup(srv.Close)
	status := func(path string) (int, consumer.Health) { return getHealth(t, srv.URL+path) }

	pub, err := amqpx.NewPublisher(context.Background(), conn, 1)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := amqpx.EventPublishing(event("ev-1", "workitem.updated"))
	if err != nil {
		t.Fatal(err)
	}
	if err := pub.Publish(context.Background(), c.Config().Exchange, "", msg); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 15*time.Second, "the handler to take the message", func() bool { return c.Stats().InFlight == 1 })

	lift := node.Alarm(t)
	close(fail)
	// The blocked state changes first; the count, the log line and the
	// Observer call follow it.
	testenv.WaitFor(t, time.Minute, "/readyz to fail while the broker blocks the consumer, and the block counted", func() bool {
		code, h := status("/readyz")
		n, _ := obs.counts()
		return code == http.StatusServiceUnavailable && h.Stats.Blocks >= 1 && n >= 1
	})
	if _, h := status("/readyz"); !h.Blocked || h.BlockedReason == "" || h.BlockedSince.IsZero() || h.Stats.Blocks != 1 {
		t.Errorf("a blocked consumer reports %+v, want blocked with its reason and time, and Stats.Blocks 1", h)
	}
	if code, _ := status("/healthz"); code != http.StatusOK {
		t.Errorf("/healthz %d while the broker blocks the consumer, want 200: a restart cannot help", code)
	}
	if n, _ := obs.counts(); n != 1 {
		t.Errorf("Observer.Blocked called %d times, want 1", n)
	}

	lift()
	testenv.WaitFor(t, time.Minute, "/readyz to pass once the alarm lifted, and the Observer told", func() bool {
		code, h := status("/readyz")
		_, n := obs.counts()
		return code == http.StatusOK && !h.Blocked && n >= 1
	})
	if _, n := obs.counts(); n != 1 {
		t.Errorf("Observer.Unblocked called %d times, want 1", n)
	}
	testenv.WaitFor(t, time.Minute, "the message to be handled after its retry", func() bool { return c.Stats().Done == 1 })
	if err := pub.Close(); err != nil {
		t.Fatal(err)
	}
}
