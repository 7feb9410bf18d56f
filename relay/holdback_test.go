package relay_test

import (
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/relay"
	"github.com/warrenmq/warren/relay/internal/relaytest"
)

// holdRecorder is a Recorder that also records the hold and the queues'
// depths.
type holdRecorder struct {
	relaytest.Recorder
	mu       sync.Mutex
	heldBy   []string
	released int
	readings map[string][]int
}

func (o *holdRecorder) HeldBack(_, queue string, _ int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.heldBy = append(o.heldBy, queue)
}

func (o *holdRecorder) Released(string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.released++
}

func (o *holdRecorder) QueueDepth(_, queue string, ready, _ int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.readings == nil {
		o.readings = map[string][]int{}
	}
	o.readings[queue] = append(o.readings[queue], ready)
}

func (o *holdRecorder) snapshot() (heldBy []string, released int, readings map[string][]int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	readings = map[string][]int{}
	for q, r := range o.readings {
		readings[q] = slices.Clone(r)
	}
	return slices.Clone(o.heldBy), o.released, readings
}

var (
	_ relay.HoldObserver  = (*holdRecorder)(nil)
	_ relay.QueueObserver = (*holdRecorder)(nil)
)

// A consumer's queue at its high-water mark holds the relay back from the
// start: the events wait in the outbox, every queue of the exchange waits
// with the deepest (the other consumer gets nothing meanwhile), nothing is
// claimed, dead or expired, and the Observer and Health name the queue.
// Once the queue drains to its low-water mark the relay lets go, and both
// queues get every event, in the order they were written (one claim loop
// publishes in the outbox's order; several keep each entity's order with
// OrderByEntity).
func TestHoldBackKeepsTheBacklogInTheOutbox(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.bindQueue()
	// The slow consumer's backlog: at the high-water mark already.
	const highWater = 5
	slow := e.slowQueue(t, highWater)
	fast := consume(t, e.queue)
	ids := e.publishN("held", 100)

	obs := &holdRecorder{}
	cfg := e.config(testenv.Name(t, "relay"))
	cfg.Observer = obs
	cfg.BatchSize = 10
	cfg.Workers = 1 // one claim loop on one channel publishes in the outbox's order
	cfg.HoldBack = &relay.HoldBack{Queues: []string{e.queue, slow}, HighWater: highWater, LowWater: 1, Interval: 20 * time.Millisecond}
	run := e.start(cfg)

	testenv.WaitFor(t, 60*time.Second, "the relay to hold back", func() bool {
		h := run.relay.Health()
		return h.HeldBack && h.HeldBy == slow
	})
	// Several readings later (a broken gate would have claimed by then),
	// nothing has left the outbox.
	_, _, before := obs.snapshot()
	testenv.WaitFor(t, 60*time.Second, "three more readings of the slow queue", func() bool {
		_, _, now := obs.snapshot()
		return len(now[slow]) >= len(before[slow])+3
	})
	if c := obs.Counts(); c.Published != 0 || c.WokenByNotify+c.WokenByPoll != 0 {
		t.Errorf("held back from the start, the relay published %d rows and woke %d times; want none", c.Published, c.WokenByNotify+c.WokenByPoll)
	}
	if n := e.count("state = 'pending'"); n != len(ids) {
		t.Errorf("%d rows pending while held, want all %d in the outbox", n, len(ids))
	}
	if n := fast.distinct(); n != 0 {
		t.Errorf("the fast consumer got %d events while the slow queue held the stream back, want 0", n)
	}
	if heldBy, _, _ := obs.snapshot(); !slices.Equal(heldBy, []string{slow}) {
		t.Errorf("the Observer was told the relay is held back by %v, want [%s]", heldBy, slow)
	}

	// The slow consumer recovers: its queue drains, the relay lets go.
	got := consume(t, slow)
	got.waitDistinct(t, len(ids)+1, 60*time.Second) // the earlier messages share one id
	fast.waitDistinct(t, len(ids), 60*time.Second)
	testenv.WaitFor(t, 60*time.Second, "the relay to let go", func() bool {
		_, released, _ := obs.snapshot()
		return released >= 1 && !run.relay.Health().HeldBack
	})
	for name, c := range map[string]*collector{"slow": got, "fast": fast} {
		var order []string
		for _, d := range c.deliveries() {
			if d.MessageId != "earlier" && !slices.Contains(order, d.MessageId) {
				order = append(order, d.MessageId)
			}
		}
		if !slices.Equal(order, ids) {
			t.Errorf("the %s queue got the events in another order than written:\n got %v\nwant %v", name, order, ids)
		}
	}
	testenv.WaitFor(t, 60*time.Second, "the outbox to empty", func() bool { return e.count("true") == 0 })
	if c := obs.Counts(); c.Dead != 0 || c.Failures != 0 {
		t.Errorf("dead %d, failures %d; want none", c.Dead, c.Failures)
	}
}

// A hold outlives a lost broker connection: the new session reads the
// queues before it claims, publishes nothing while the queue is still
// deep, and the hold keeps its start (Health's HeldSince, which the
// alert's five minutes count from) and is never reported released.
func TestHoldBackOutlivesALostConnection(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const highWater = 3
	slow := e.slowQueue(t, highWater)
	ids := e.publishN("held", 20)
	obs := &holdRecorder{}
	name := testenv.Name(t, "relay")
	cfg := e.config(name)
	cfg.Observer = obs
	cfg.HoldBack = &relay.HoldBack{Queues: []string{slow}, HighWater: highWater, Interval: 20 * time.Millisecond}
	var connected counter
	run := e.start(cfg, func(r *relay.Relay) { relay.SetConnectedHook(r, connected.hook()) })
	testenv.WaitFor(t, 60*time.Second, "the relay to hold back", func() bool { return run.relay.Health().HeldBack })
	since := run.relay.Health().HeldSince
	for range 2 {
		was := connected.value()
		if n := testenv.CloseConnections(t, name); n == 0 {
			t.Fatalf("found no connection named %s to drop", name)
		}
		connected.waitAbove(t, was, "the relay to reconnect")
	}
	// Several readings on the new session.
	_, _, before := obs.snapshot()
	testenv.WaitFor(t, 60*time.Second, "three readings after the reconnects", func() bool {
		_, _, now := obs.snapshot()
		return len(now[slow]) >= len(before[slow])+3
	})
	h := run.relay.Health()
	if !h.HeldBack || !h.HeldSince.Equal(since) {
		t.Errorf("after two lost connections: held %v since %v, want held since %v", h.HeldBack, h.HeldSince, since)
	}
	if _, released, _ := obs.snapshot(); released != 0 {
		t.Errorf("the Observer heard %d releases, want none: the queue never drained", released)
	}
	if c := obs.Counts(); c.Published != 0 {
		t.Errorf("%d rows published while the queue was at its mark", c.Published)
	}
	if n := e.count("state = 'pending'"); n != len(ids) {
		t.Errorf("%d rows pending, want all %d", n, len(ids))
	}
}

// While held, a database that stops answering (packets dropped, nothing
// refused) makes the relay not ready, and it stays alive: the ping is
// bounded as a claim is, so the loop comes round and a liveness probe has
// no reason to restart a relay that waits as designed.
func TestHoldBackWithADatabaseThatStopsAnswering(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.bindQueue()
	if err := e.ch.Publish("", e.queue, false, false, amqp.Publishing{MessageId: "earlier"}); err != nil {
		t.Fatal(err)
	}
	dbURL := testenv.DatabaseURL(t)
	p := testenv.StartProxy(t, hostOf(t, dbURL))
	cfg := e.config(testenv.Name(t, "relay"))
	cfg.DatabaseURL = p.URL(t, dbURL)
	cfg.Lease, cfg.PublishTimeout = 2*time.Second, time.Second
	cfg.HoldBack = &relay.HoldBack{Queues: []string{e.queue}, HighWater: 1, Interval: 20 * time.Millisecond}
	run := e.start(cfg)
	testenv.WaitFor(t, 60*time.Second, "the relay to hold back, ready", func() bool {
		h := run.relay.Health()
		return h.HeldBack && h.Ready && h.DatabaseOK
	})
	p.Stall(true)
	defer p.Stall(false)
	testenv.WaitFor(t, 60*time.Second, "the held relay to see the database gone", func() bool { return !run.relay.Health().DatabaseOK })
	if h := run.relay.Health(); !h.Alive || h.StuckWorkers != 0 || h.Ready {
		t.Errorf("held, with the database gone: alive %v, stuck workers %d, ready %v; want alive, none stuck, not ready", h.Alive, h.StuckWorkers, h.Ready)
	}
}

// slowQueue declares a queue bound to the exchange that already holds
// backlog messages (id "earlier"): a slow consumer's, for the hold to read.
func (e *env) slowQueue(t *testing.T, backlog int) string {
	t.Helper()
	slow := testenv.Name(t, "slow")
	testenv.CleanupQueues(t, slow)
	if err := declareQueue(e.ch, slow, nil); err != nil {
		t.Fatal(err)
	}
	if err := e.ch.QueueBind(slow, "", e.exchange, false, nil); err != nil {
		t.Fatal(err)
	}
	for range backlog {
		if err := e.ch.Publish("", slow, false, false, amqp.Publishing{MessageId: "earlier"}); err != nil {
			t.Fatal(err)
		}
	}
	testenv.WaitFor(t, 30*time.Second, "the earlier messages to be in the slow queue", func() bool {
		q, err := e.ch.QueueDeclarePassive(slow, true, false, false, false, nil)
		return err == nil && q.Messages == backlog
	})
	return slow
}

// A HoldBack without queues, or whose low-water mark is not below its
// high-water mark, is refused.
func TestHoldBackConfigIsChecked(t *testing.T) {
	e := newEnv(t)
	for name, h := range map[string]relay.HoldBack{
		"no queues":              {HighWater: 10},
		"an empty queue name":    {Queues: []string{""}, HighWater: 10},
		"no high water":          {Queues: []string{"q"}},
		"low water at the high":  {Queues: []string{"q"}, HighWater: 10, LowWater: 10},
		"an interval under 1 ms": {Queues: []string{"q"}, HighWater: 10, Interval: time.Microsecond},
	} {
		cfg := e.config("hold")
		cfg.HoldBack = &h
		if _, err := relay.New(cfg); err == nil {
			t.Errorf("%s: relay.New accepted HoldBack %+v", name, h)
		}
	}
}

// Why the relay holds rows back rather than leaning on a queue length
// limit with overflow reject-publish (docs/adr/028-backpressure.md, option
// B): the broker nacks a publish that a full queue refuses, but the other
// queues of a fanout got it, so every retry of the nacked event copies it
// again to every healthy consumer.
func TestRejectPublishCopiesRetriesToTheOtherQueues(t *testing.T) {
	t.Parallel()
	ch, err := testenv.AMQPConn(t).Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	ex, limited, other := testenv.Name(t, "x"), testenv.Name(t, "limited"), testenv.Name(t, "other")
	testenv.CleanupExchanges(t, ex)
	testenv.CleanupQueues(t, limited, other)
	limit := amqp.Table{"x-max-length": int32(1), "x-overflow": "reject-publish"}
	for _, err := range []error{
		ch.ExchangeDeclare(ex, "fanout", true, false, false, false, nil),
		declareQueue(ch, limited, limit),
		declareQueue(ch, other, nil),
		ch.QueueBind(limited, "", ex, false, nil),
		ch.QueueBind(other, "", ex, false, nil),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	publish := func(id string) bool {
		t.Helper()
		dc, err := ch.PublishWithDeferredConfirm(ex, "", false, false, amqp.Publishing{MessageId: id})
		if err != nil {
			t.Fatal(err)
		}
		return dc.Wait()
	}
	if !publish("first") {
		t.Fatal("the first publish was nacked, with room in both queues")
	}
	for range 3 { // a relay retrying the refused event
		if publish("second") {
			t.Fatal("a publish to the full queue was confirmed")
		}
	}
	q, err := ch.QueueDeclarePassive(other, true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if q.Messages != 4 {
		t.Errorf("the other queue holds %d messages, want 4: the first event and three copies of the refused one", q.Messages)
	}
}

// A reading of the queues that the broker never answers (it stopped
// reading the connection: an alarm) does not hold up a stop: Run returns
// within the bound a stop has whatever the broker does.
func TestHoldBackStopWhileAReadingHangs(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.bindQueue()
	brokerURL := testenv.AMQPURL(t)
	p := testenv.StartAMQPProxy(t, hostOf(t, brokerURL))
	var readings counter
	cfg := e.config(testenv.Name(t, "relay"))
	cfg.AMQPURL = p.URL(t, brokerURL)
	cfg.HoldBack = &relay.HoldBack{Queues: []string{e.queue}, HighWater: 1000, Interval: 5 * time.Millisecond}
	run := e.start(cfg, func(r *relay.Relay) { relay.SetReadingHook(r, readings.hook()) })
	readings.waitAbove(t, 2, "the relay to read the queue")
	p.StopReading(true)
	// A reading that begins now is one the broker will not answer.
	readings.waitAbove(t, readings.value(), "a reading after the broker stopped reading")
	stopsInTime(t, run, cfg, p, "while its reading of the queues hung")
}

// A queue that exists but cannot be read (an exclusive queue of another
// connection) holds the relay back, as if full, and Health names it; the
// queue named tracks the deepest while held; a queue name AMQP cannot
// carry is refused; and a relay held from its start is ready, since its
// database answers.
func TestHoldBackNamesTheQueueThatHoldsIt(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.bindQueue()
	locked := testenv.Name(t, "locked")
	owner, err := testenv.AMQPConn(t).Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := owner.QueueDeclare(locked, false, true, true, false, nil); err != nil {
		t.Fatal(err)
	}
	cfg := e.config(testenv.Name(t, "relay"))
	cfg.HoldBack = &relay.HoldBack{Queues: []string{e.queue, locked}, HighWater: 3, Interval: 10 * time.Millisecond}
	run := e.start(cfg)
	testenv.WaitFor(t, 60*time.Second, "the unreadable queue to hold the relay back, the relay ready", func() bool {
		h := run.relay.Health()
		return h.HeldBack && h.HeldBy == locked && h.Ready
	})
	// The exclusive queue goes with its connection; the other queue is
	// now the deepest, above the low-water mark: it holds the relay.
	for range 3 {
		if err := e.ch.Publish("", e.queue, false, false, amqp.Publishing{MessageId: "earlier"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := owner.Close(); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 60*time.Second, "Health to name the queue that holds the relay now", func() bool {
		h := run.relay.Health()
		return h.HeldBack && h.HeldBy == e.queue
	})

	long := cfg
	long.HoldBack = &relay.HoldBack{Queues: []string{strings.Repeat("q", 256)}, HighWater: 3}
	if _, err := relay.New(long); err == nil {
		t.Error("relay.New accepted a queue name of 256 bytes, which the AMQP client closes the connection over")
	}
}
