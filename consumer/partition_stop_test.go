package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/consumer"
	"github.com/warrenmq/warren/internal/testenv"
)

// AMQP class and method ids the tests watch for on a proxy.
const (
	classChannel, methodChannelOpen, methodChannelClose = 20, 10, 40
	classQueue, methodQueueDeclare                      = 50, 10
)

// A partitioned consumer stops within ShutdownGrace plus a bound while the
// broker stops reading its connection, even when its rebalancer has a
// round trip (counting the replicas) out that the broker never answers.
func TestPartitionedStopWhileBrokerStopsReading(t *testing.T) {
	// Serial: asserts the stop ends within a time bound.
	brokerURL := testenv.AMQPURL(t)
	u, _ := url.Parse(brokerURL)
	proxy := testenv.StartAMQPProxy(t, u.Host)
	const grace = time.Second
	c := newConsumer(t, func(cfg *consumer.Config) {
		cfg.URL = proxy.URL(t, brokerURL)
		cfg.ShutdownGrace = grace
		cfg.Partitions = 2
	})
	c.HandleFunc("", func(ctx context.Context, m *warren.Message) error { return nil })
	stop := start(t, c)
	// The broker stops reading from the rebalancer's next round trip on
	// (its count of the replicas, a passive queue.declare, or a
	// channel.open before one): that frame and all after it get no answer.
	probeSent := stopReadingAtRebalancer(proxy)
	select {
	case <-probeSent:
	case <-time.After(30 * time.Second):
		t.Fatal("the rebalancer sent nothing within 30s")
	}
	done := make(chan error, 1)
	begin := time.Now()
	go func() { done <- stop() }()
	const bound = grace + 2*5*time.Second + 12*time.Second
	select {
	case <-done:
		t.Logf("stopped in %v", time.Since(begin).Round(time.Millisecond))
	case <-time.After(bound):
		proxy.SetUp(false)
		t.Fatalf("the partitioned consumer did not stop within %v while the broker was not reading", bound)
	}
}

// A partitioned session lost while its rebalancer waits on a broker that
// stopped reading (here: the broker cancels a partition's consumer, its
// queue deleted) is torn down within a bound, not deadlocked on the
// rebalancer, and the consumer reconnects once the broker reads again.
func TestPartitionedSessionLostWhileRebalancerWaits(t *testing.T) {
	// Serial: asserts the lost session is torn down within a time bound.
	brokerURL := testenv.AMQPURL(t)
	u, _ := url.Parse(brokerURL)
	proxy := testenv.StartAMQPProxy(t, u.Host)
	var log *logLines
	c := newConsumer(t, func(cfg *consumer.Config) {
		cfg.URL = proxy.URL(t, brokerURL)
		cfg.Partitions = 2
		cfg.ReconnectMaxDelay = time.Second
		log = captureLog(t, cfg)
	})
	c.HandleFunc("", func(ctx context.Context, m *warren.Message) error { return nil })
	start(t, c)
	probeSent := stopReadingAtRebalancer(proxy)
	select {
	case <-probeSent:
	case <-time.After(30 * time.Second):
		t.Fatal("the rebalancer sent nothing within 30s")
	}
	// The broker cancels partition 1's consumer: the session is lost.
	ch := testenv.Channel(t)
	if _, err := ch.QueueDelete(c.Topology().PartitionQueues[1], false, false, false); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 25*time.Second, "the lost session torn down (logged 'lost the broker; reconnecting')", func() bool {
		return log.has("lost the broker; reconnecting")
	})
	proxy.OnClientMethod(nil)
	proxy.StopReading(false)
	testenv.WaitFor(t, 60*time.Second, "the consumer ready again", func() bool {
		return c.Health().Ready && c.Stats().Reconnects >= 1
	})
}

// A transient failure during the shutdown grace is not retried in place:
// the delivery returns to its queue, counted as requeued, not retried.
func TestPartitionFailureDuringShutdownIsRequeued(t *testing.T) {
	t.Parallel()
	var log *logLines
	c := newConsumer(t, func(cfg *consumer.Config) {
		cfg.Partitions = 1
		cfg.ShutdownGrace = 30 * time.Second
		log = captureLog(t, cfg)
	})
	started := make(chan struct{}, 1)
	c.HandleFunc("", func(ctx context.Context, m *warren.Message) error {
		select {
		case started <- struct{}{}:
		default:
		}
		// Fail once the shutdown has begun draining this handler.
		for !log.has("draining in-flight handlers") {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(5 * time.Millisecond):
			}
		}
		return errors.New("transient, during the shutdown")
	})
	stop := start(t, c)
	publishInOrder(t, c.Topology().Exchange, publishingsOf(t, seqEvent("shutdown", 1)))
	<-started
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if s := c.Stats(); s.Requeued != 1 || s.Retried != 0 {
		t.Errorf("requeued %d, retried %d; want 1 and 0", s.Requeued, s.Retried)
	}
	ch := testenv.Channel(t)
	if depth := testenv.QueueDepth(t, ch, c.Topology().PartitionQueues[0]); depth != 1 {
		t.Errorf("%d messages in the partition queue, want the one handed back", depth)
	}
}

// Health does not wait behind a partition's re-subscription, which may
// take up to SetupTimeout while the broker does not answer.
func TestPartitionHealthNotHeldByRelease(t *testing.T) {
	// Serial: asserts Health answers within 2s.
	brokerURL := testenv.AMQPURL(t)
	u, _ := url.Parse(brokerURL)
	proxy := testenv.StartAMQPProxy(t, u.Host)
	t.Cleanup(func() { proxy.StopReading(false) })
	a := newConsumer(t, func(cfg *consumer.Config) {
		cfg.URL = proxy.URL(t, brokerURL)
		cfg.Partitions = 2
	})
	a.HandleFunc("", func(ctx context.Context, m *warren.Message) error { return nil })
	start(t, a)
	// Events of many entities make a active on both partitions.
	var evs []warren.Event
	for i := range 40 {
		evs = append(evs, seqEvent(fmt.Sprintf("health-%d", i), 1))
	}
	publishInOrder(t, a.Topology().Exchange, publishingsOf(t, evs...))
	testenv.WaitFor(t, 30*time.Second, "a active on both partitions", func() bool { return len(a.Health().ActivePartitions) == 2 })

	// When a releases a partition (channel.close) and subscribes again
	// (channel.open), the broker stops reading a's connection.
	var closed atomic.Bool
	stuck := make(chan struct{})
	var once atomic.Bool
	proxy.OnClientMethod(func(class, method uint16) {
		switch {
		case class == classChannel && method == methodChannelClose:
			closed.Store(true)
		case class == classChannel && method == methodChannelOpen && closed.Load() && once.CompareAndSwap(false, true):
			proxy.StopReading(true)
			close(stuck)
		}
	})
	cfg := a.Config()
	b := consumerAt(t, brokerURL, func(c2 *consumer.Config) { *c2 = cfg; c2.URL = brokerURL })
	b.HandleFunc("", func(ctx context.Context, m *warren.Message) error { return nil })
	start(t, b)
	select {
	case <-stuck:
	case <-time.After(30 * time.Second):
		t.Fatal("a released no partition within 30s")
	}
	answered := make(chan consumer.Health, 1)
	go func() { answered <- a.Health() }()
	select {
	case <-answered:
	case <-time.After(2 * time.Second):
		t.Fatal("Health did not answer within 2s while a partition was being subscribed again")
	}
}

// On shutdown a partition with nothing in flight is handed on at once,
// while the replica still drains a handler on another: the next replica
// handles its events before the drain ends.
func TestPartitionIdleHandedOnAtStop(t *testing.T) {
	t.Parallel()
	a := newConsumer(t, func(cfg *consumer.Config) {
		cfg.Partitions = 2
		cfg.ShutdownGrace = time.Minute
	})
	block := make(chan struct{})
	defer close(block)
	blocking := make(chan struct{})
	var blockOnce atomic.Bool
	queueOf := make(map[string]string) // entity → partition queue, as a saw it
	var mu sync.Mutex
	a.HandleFunc("", func(ctx context.Context, m *warren.Message) error {
		mu.Lock()
		queueOf[m.Event.EntityID] = m.Queue
		mu.Unlock()
		if m.Event.ID == "block-event" && blockOnce.CompareAndSwap(false, true) {
			close(blocking)
			<-block
		}
		return nil
	})
	stopA := start(t, a)
	topo := a.Topology()
	// Entities on both partitions: a becomes active on both.
	var evs []warren.Event
	for i := range 20 {
		evs = append(evs, seqEvent(fmt.Sprintf("idle-%d", i), 1))
	}
	publishInOrder(t, topo.Exchange, publishingsOf(t, evs...))
	// Taking both partitions precedes handling anything, so wait for
	// the events themselves: the search below needs where each went.
	testenv.WaitFor(t, 30*time.Second, "the 20 events handled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(queueOf) == len(evs)
	})
	testenv.WaitFor(t, 30*time.Second, "a active on both partitions", func() bool { return len(a.Health().ActivePartitions) == 2 })
	// An entity whose partition's handler then blocks, and one of the
	// other partition.
	mu.Lock()
	var other string
	for e, q := range queueOf {
		if q == topo.PartitionQueues[0] {
			other = e
		}
	}
	mu.Unlock()
	if other == "" {
		t.Fatal("no entity on partition 0")
	}
	var blocked string
	for i := 0; blocked == ""; i++ {
		publishInOrder(t, topo.Exchange, publishingsOf(t, seqEvent(fmt.Sprintf("probe-%d", i), 1)))
		testenv.WaitFor(t, 10*time.Second, "the probe handled", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return queueOf[fmt.Sprintf("probe-%d", i)] != ""
		})
		mu.Lock()
		if queueOf[fmt.Sprintf("probe-%d", i)] == topo.PartitionQueues[1] {
			blocked = fmt.Sprintf("probe-%d", i)
		}
		mu.Unlock()
	}
	blockEv := seqEvent(blocked, 2)
	blockEv.ID = "block-event"
	publishInOrder(t, topo.Exchange, publishingsOf(t, blockEv))
	<-blocking
	stopped := make(chan error, 1)
	go func() { stopped <- stopA() }()

	cfg := a.Config()
	b := consumerAt(t, cfg.URL, func(c2 *consumer.Config) { *c2 = cfg })
	handled := make(chan string, 10)
	b.HandleFunc("", func(ctx context.Context, m *warren.Message) error {
		handled <- m.Event.ID
		return nil
	})
	start(t, b)
	publishInOrder(t, topo.Exchange, publishingsOf(t, seqEvent(other, 2)))
	select {
	case <-handled:
	case err := <-stopped:
		t.Fatalf("a stopped (%v) before b handled partition 0's event", err)
	case <-time.After(20 * time.Second):
		t.Fatal("b did not handle partition 0's event within 20s while a drained partition 1")
	}
}

// stopReadingAtRebalancer makes proxy stop reading what its client sends
// from the client's next channel.open or queue.declare on (once the
// consumer is ready, only the rebalancer sends them), and returns a
// channel closed when it has.
func stopReadingAtRebalancer(proxy *testenv.Proxy) <-chan struct{} {
	held := make(chan struct{})
	var once atomic.Bool
	proxy.OnClientMethod(func(class, method uint16) {
		if (class == classQueue && method == methodQueueDeclare || class == classChannel && method == methodChannelOpen) &&
			once.CompareAndSwap(false, true) {
			proxy.StopReading(true) // before the proxy passes the frame on: it is held
			close(held)
		}
	})
	return held
}
