package consumer_test

import (
	"context"
	"errors"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/consumer"
	"github.com/warrenmq/warren/internal/testenv"
)

// The broker stops reading the consumer's connection (as RabbitMQ does to
// a connection it blocks during a memory or disk alarm) while its
// heartbeats keep flowing, so no read deadline fires. A stop still ends
// within ShutdownGrace plus a bound, and the message whose ack could not
// be sent is back in the queue, not lost.
func TestStopWhileTheBrokerStopsReading(t *testing.T) {
	// Serial: asserts the stop ends within a time bound.
	brokerURL := testenv.AMQPURL(t)
	u, _ := url.Parse(brokerURL)
	proxy := testenv.StartAMQPProxy(t, u.Host)
	const grace = 2 * time.Second
	c := newConsumer(t, func(cfg *consumer.Config) {
		cfg.URL = proxy.URL(t, brokerURL)
		cfg.ShutdownGrace = grace
	})
	started := make(chan struct{}, 1)
	release := make(chan struct{})
	c.HandleFunc("", func(ctx context.Context, m *warren.Message) error {
		started <- struct{}{}
		<-release
		return nil
	})
	stop := start(t, c)
	newPublisher(t).events(c.Topology().Exchange, "", event("blocked-1", "workitem.updated"))
	<-started
	proxy.StopReading(true)

	stopped := make(chan error, 1)
	begin := time.Now()
	go func() { stopped <- stop() }()
	close(release) // the handler succeeds; its ack cannot reach the broker
	// Run promises ShutdownGrace plus a few seconds: the first round trip
	// on the way out that gets no answer within CloseTimeout (5s) closes
	// the connection, and every later one fails at once. The slack is for
	// a busy machine; a stop of 30s fails.
	const bound = grace + 2*5*time.Second + 12*time.Second
	select {
	case <-stopped:
		t.Logf("stopped in %v", time.Since(begin).Round(time.Millisecond))
	case <-time.After(bound):
		proxy.SetUp(false) // drop the connection, so the consumer can stop at all
		t.Fatalf("the consumer did not stop within %v while the broker was not reading", bound)
	}
	ch := testenv.Channel(t)
	testenv.WaitFor(t, 20*time.Second, "the unacked message back in the queue", func() bool {
		return testenv.QueueDepth(t, ch, c.Topology().Queue) == 1
	})
}

// A session whose second channel fails to start is abandoned whole: the
// deliveries its first channel already received are not handed to
// workers (their acks would go to a channel about to close, and the
// broker would deliver them again), but come back on the next session.
// Every message is handled exactly once.
func TestHalfStartedSessionRunsNoJobs(t *testing.T) {
	t.Parallel()
	evs := manyEvents(3, "half", "workitem.updated")
	rec := newRecorder()
	handled := make(chan struct{}, 1)
	restarted := make(chan struct{})
	c := newConsumer(t, func(cfg *consumer.Config) { cfg.Channels = 2 })
	c.HandleFunc("", func(ctx context.Context, m *warren.Message) error {
		select {
		case handled <- struct{}{}:
		default:
		}
		<-restarted // a handler of the first session outlives it
		rec.record(m)
		return nil
	})
	pub := newPublisher(t)
	ch := testenv.Channel(t)
	var sessions atomic.Int32
	var once sync.Once
	consumer.SetBeforeConsumeHook(c, func(i int) error {
		if i == 0 && sessions.Add(1) == 2 {
			once.Do(func() { close(restarted) })
		}
		if i != 1 || sessions.Load() != 1 {
			return nil
		}
		// Channel 0 consumes: put messages in its prefetch, then fail.
		pub.events(c.Topology().Exchange, "", evs...)
		for deadline := time.Now().Add(10 * time.Second); testenv.QueueDepth(t, ch, c.Topology().Queue) > 0; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Error("the messages were not delivered to channel 0 within 10s")
				break
			}
		}
		// Give a wrongly handed-out job time to reach a handler. Nothing
		// waits on this: with the fix no handler is ever called here.
		select {
		case <-handled:
		case <-time.After(2 * time.Second):
		}
		return errors.New("injected: the second channel could not start")
	})
	t.Cleanup(func() { once.Do(func() { close(restarted) }) })
	stop := start(t, c)
	rec.waitDistinct(t, len(evs), 30*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		if n := rec.count(ev.ID); n != 1 {
			t.Errorf("%s handled %d times, want once", ev.ID, n)
		}
	}
	if depth := testenv.QueueDepth(t, ch, c.Topology().Queue); depth != 0 {
		t.Errorf("%d messages left in the queue", depth)
	}
}
