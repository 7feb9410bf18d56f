package consumer_test

import (
	"context"
	"errors"
	"net/url"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/consumer"
	"github.com/warrenmq/warren/internal/amqpx"
	"github.com/warrenmq/warren/internal/testenv"
)

// An operator deletes the retry tier while the consumer runs. The next
// retry declares it again and goes through: the message is handled a
// second time, and is not requeued in a loop meanwhile.
func TestDeletedRetryTierIsDeclaredAgain(t *testing.T) {
	t.Parallel()
	rec := newRecorder()
	c := newConsumer(t, func(cfg *consumer.Config) { cfg.RetryDelays = []time.Duration{100 * time.Millisecond} })
	c.HandleFunc("", func(ctx context.Context, m *warren.Message) error {
		rec.record(m)
		if m.Attempt == 1 {
			return errBoom
		}
		return nil
	})
	start(t, c)
	ch := testenv.Channel(t)
	if _, err := ch.QueueDelete(c.Topology().Retry[0].Queue, false, false, false); err != nil {
		t.Fatal(err)
	}
	newPublisher(t).events(c.Topology().Exchange, "", event("flaky", "workitem.updated"))
	testenv.WaitFor(t, 20*time.Second, "the second attempt, through the tier", func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return slices.Contains(rec.attempts["flaky"], 2)
	})
	// Retried counts after the broker confirmed the retry's copy.
	testenv.WaitFor(t, 20*time.Second, "the retry counted", func() bool { return c.Stats().Retried >= 1 })
	if s := c.Stats(); s.Retried != 1 || s.Requeued > 1 {
		t.Errorf("stats %+v, want one retry and at most one requeue", s)
	}
	if n := rec.count("flaky"); n != 2 {
		t.Errorf("handled %d times, want 2", n)
	}
}

// An operator deletes the DLQ while the consumer runs. The next dead
// letter declares it (and its binding) again and lands in it.
func TestDeletedDLQIsDeclaredAgain(t *testing.T) {
	t.Parallel()
	c := newConsumer(t, nil)
	c.HandleFunc("", func(ctx context.Context, m *warren.Message) error {
		return warren.Permanent(errBoom)
	})
	start(t, c)
	conn := testenv.AMQPConn(t)
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDelete(c.Topology().DLQ, false, false, false); err != nil {
		t.Fatal(err)
	}
	newPublisher(t).events(c.Topology().Exchange, "", event("doomed", "workitem.updated"))
	testenv.WaitFor(t, 20*time.Second, "the dead letter in a DLQ declared again", func() bool {
		probe, err := conn.Channel() // a failed passive declare closes its channel
		if err != nil {
			t.Fatal(err)
		}
		defer probe.Close()
		q, err := probe.QueueDeclarePassive(c.Topology().DLQ, false, false, false, false, nil)
		return err == nil && q.Messages == 1
	})
	if d := getOne(t, ch, c.Topology().DLQ, 5*time.Second); d.MessageId != "doomed" {
		t.Fatalf("the DLQ holds %q", d.MessageId)
	}
	// The broker holds the copy (confirmed) before the consumer acks the
	// original and counts it, so the count is waited for, not read at once.
	testenv.WaitFor(t, 20*time.Second, "the dead letter counted", func() bool { return c.Stats().DeadLettered == 1 })
	if s := c.Stats(); s.DeadLettered != 1 || s.Requeued > 1 {
		t.Errorf("stats %+v, want one dead letter and at most one requeue", s)
	}
}

// stallingRedeclare builds a consumer, through a proxy, whose first
// re-declaration of its topology meets a broker that stopped reading the
// connection (its heartbeats keep flowing). It returns once the consumer
// runs, with a channel that receives when the re-declaration began.
func stallingRedeclare(t *testing.T, obs consumer.Observer, rec *recorder) (*consumer.BaseConsumer, *testenv.Proxy, <-chan struct{}) {
	t.Helper()
	brokerURL := testenv.AMQPURL(t)
	u, _ := url.Parse(brokerURL)
	proxy := testenv.StartAMQPProxy(t, u.Host)
	c := newConsumer(t, func(cfg *consumer.Config) {
		cfg.URL = proxy.URL(t, brokerURL)
		cfg.PublishTimeout = time.Second
		cfg.RetryDelays = []time.Duration{100 * time.Millisecond}
		cfg.Observer = obs
	})
	stalled := make(chan struct{})
	var once sync.Once
	consumer.SetBeforeRedeclareHook(c, func() {
		once.Do(func() {
			proxy.StopReading(true)
			close(stalled)
		})
	})
	c.HandleFunc("", func(ctx context.Context, m *warren.Message) error {
		rec.record(m)
		if m.Attempt == 1 {
			return errBoom
		}
		return nil
	})
	start(t, c)
	if _, err := testenv.Channel(t).QueueDelete(c.Topology().Retry[0].Queue, false, false, false); err != nil {
		t.Fatal(err)
	}
	newPublisher(t).events(c.Topology().Exchange, "", event("slow", "workitem.updated"))
	select {
	case <-stalled:
	case <-time.After(30 * time.Second):
		t.Fatal("the retry never declared the deleted tier again")
	}
	return c, proxy, stalled
}

// A re-declaration that takes longer than PublishTimeout (the broker
// answers after three of them, well within SetupTimeout) is not cut off:
// the session survives, and the retry goes through on it.
func TestSlowRedeclareKeepsTheSession(t *testing.T) {
	t.Parallel()
	obs := &lossObserver{}
	rec := newRecorder()
	_, proxy, _ := stallingRedeclare(t, obs, rec)
	<-time.After(3 * time.Second) // the broker's stall, the fault under test
	proxy.StopReading(false)
	testenv.WaitFor(t, 30*time.Second, "the second attempt, through the tier", func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return slices.Contains(rec.attempts["slow"], 2)
	})
	if errs := obs.lost(); len(errs) != 0 {
		t.Fatalf("the session was lost during a slow re-declaration: %v", errs)
	}
}

// A re-declaration the broker never answers closes the connection after
// SetupTimeout, and the session is reported lost because the broker did
// not answer (ErrNoAnswer), not as a cancelled consumer. Once the broker
// reads again, the consumer is back and the message is retried.
func TestUnansweredRedeclareFailsTheSessionWithErrNoAnswer(t *testing.T) {
	t.Parallel()
	obs := &lossObserver{}
	rec := newRecorder()
	_, proxy, _ := stallingRedeclare(t, obs, rec)
	testenv.WaitFor(t, amqpx.SetupTimeout+30*time.Second, "the session to be lost", func() bool { return len(obs.lost()) > 0 })
	if err := obs.lost()[0]; !errors.Is(err, amqpx.ErrNoAnswer) {
		t.Errorf("the session was lost with %v, want an error wrapping ErrNoAnswer", err)
	}
	proxy.StopReading(false)
	testenv.WaitFor(t, 60*time.Second, "the second attempt, on a new connection", func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return slices.Contains(rec.attempts["slow"], 2)
	})
}

// lossObserver records the errors a consumer's sessions were lost with.
type lossObserver struct {
	mu   sync.Mutex
	errs []error
}

func (o *lossObserver) Received(string)                     {}
func (o *lossObserver) Settled(string, consumer.Settlement) {}
func (o *lossObserver) Connected(string, bool)              {}
func (o *lossObserver) Disconnected(_ string, err error) {
	if err != nil {
		o.mu.Lock()
		o.errs = append(o.errs, err)
		o.mu.Unlock()
	}
}

func (o *lossObserver) lost() []error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.errs)
}
