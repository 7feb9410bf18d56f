// Package relaytest holds the scenarios both relays pass, through one
// adapter each: above all the Observer test, since the polling relay
// (package relay) and the CDC relay (package relay/cdc) must tell a
// [relay.Observer] the same things about the same events, so that one
// adapter (warrenprom/relayprom) reads either; and the message properties
// both publish. Only test code imports it.
package relaytest

import (
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/outbox"
	"github.com/warrenmq/warren/relay"
)

// Recorder counts what a relay tells its Observer, block hooks included:
// it implements relay.Observer and relay.BlockObserver.
type Recorder struct {
	mu                  sync.Mutex
	notify, poll        int
	published, failures int
	dead                int
	noInsertedAt        int // publications without InsertedAt
	blocked, unblocked  int
	stats               []outbox.Stats
	outboxes            map[string]bool
}

var (
	_ relay.Observer      = (*Recorder)(nil)
	_ relay.BlockObserver = (*Recorder)(nil)
)

func (o *Recorder) note(outbox string, f func()) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.outboxes == nil {
		o.outboxes = map[string]bool{}
	}
	o.outboxes[outbox] = true
	f()
}

// Woken implements relay.Observer.
func (o *Recorder) Woken(outbox string, byNotify bool) {
	o.note(outbox, func() {
		if byNotify {
			o.notify++
		} else {
			o.poll++
		}
	})
}

// Published implements relay.Observer.
func (o *Recorder) Published(outbox string, p relay.Publication) {
	o.note(outbox, func() {
		if p.InsertedAt.IsZero() {
			o.noInsertedAt++
		}
		if p.Err != nil {
			o.failures++
		} else {
			o.published++
		}
	})
}

// Dead implements relay.Observer.
func (o *Recorder) Dead(outbox string, n int) { o.note(outbox, func() { o.dead += n }) }

// OutboxStats implements relay.Observer.
func (o *Recorder) OutboxStats(outbox string, s outbox.Stats) {
	o.note(outbox, func() { o.stats = append(o.stats, s) })
}

// Blocked implements relay.BlockObserver.
func (o *Recorder) Blocked(outbox, reason string) { o.note(outbox, func() { o.blocked++ }) }

// Unblocked implements relay.BlockObserver.
func (o *Recorder) Unblocked(outbox string) { o.note(outbox, func() { o.unblocked++ }) }

// Counts is a copy of what the Recorder was told.
type Counts struct {
	WokenByNotify, WokenByPoll int
	Published, Failures, Dead  int
	NoInsertedAt               int // publications without InsertedAt
	Blocked, Unblocked         int
	LastStats                  *outbox.Stats
	Outboxes                   []string
}

// Counts returns what the Recorder was told so far.
func (o *Recorder) Counts() Counts {
	o.mu.Lock()
	defer o.mu.Unlock()
	c := Counts{WokenByNotify: o.notify, WokenByPoll: o.poll, Published: o.published, Failures: o.failures, Dead: o.dead,
		NoInsertedAt: o.noInsertedAt, Blocked: o.blocked, Unblocked: o.unblocked}
	if n := len(o.stats); n > 0 {
		last := o.stats[n-1]
		c.LastStats = &last
	}
	for name := range o.outboxes {
		c.Outboxes = append(c.Outboxes, name)
	}
	return c
}

// Scenarios runs every scenario of this package as a parallel subtest,
// each on a fresh table and relay from setup: the Observer test both
// relays pass.
func Scenarios(t *testing.T, setup func(t *testing.T) (*testenv.OutboxTable, Start)) {
	for name, run := range map[string]func(*testing.T, *testenv.OutboxTable, Start){
		"reports": Run, "panicking observer": RunPanicking, "plane properties": RunPlaneProperties,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ob, start := setup(t)
			run(t, ob, start)
		})
	}
}

// Settings are what a scenario asks of the relay it starts.
type Settings struct {
	Exchange    string         // where the relay publishes
	Observer    relay.Observer // the relay's Observer
	MaxAttempts int            // attempts per row
	Logger      *slog.Logger   // the relay's logger; nil: the test's own
	// PlaneProperties is the relay's setting of that name.
	PlaneProperties bool
}

// Start runs a relay on the test's table with s and a stats interval
// short enough for the test.
type Start func(s Settings)

// Run is the scenario: five events a queue takes and one that no queue
// is bound for (the broker returns it as unroutable, which spends an
// attempt in both relays). Both relays must report five confirmed
// publishes, one failed publish per attempt of the unroutable event, one
// dead row once its mark is committed, and the table's stats until
// nothing is pending; and name no other outbox.
func Run(t *testing.T, ob *testenv.OutboxTable, start Start) {
	t.Helper()
	const good, maxAttempts = 5, 3
	// The relays publish to a fanout exchange; a topic exchange behind
	// it routes by event type, so that "lost.#" reaches no queue.
	exchange, _ := declare(t)
	rec := &Recorder{}
	start(Settings{Exchange: exchange, Observer: rec, MaxAttempts: maxAttempts})
	publish(t, ob, good)

	testenv.WaitFor(t, 90*time.Second, "the Observer told of 5 publishes and 1 dead row", func() bool {
		c := rec.Counts()
		return c.Published >= good && c.Dead >= 1
	})
	testenv.WaitFor(t, 60*time.Second, "stats with nothing pending", func() bool {
		c := rec.Counts()
		return c.LastStats != nil && c.LastStats.Pending == 0
	})
	c := rec.Counts()
	if c.Published != good || c.Dead != 1 || c.Failures != maxAttempts {
		t.Errorf("published %d, dead %d, failed publishes %d; want %d, 1 and %d (one per attempt of the unroutable event)",
			c.Published, c.Dead, c.Failures, good, maxAttempts)
	}
	if c.NoInsertedAt != 0 {
		t.Errorf("%d publications without InsertedAt: the outbox latency cannot be measured", c.NoInsertedAt)
	}
	if len(c.Outboxes) != 1 || c.Outboxes[0] != ob.Table.Name() {
		t.Errorf("the Observer was told of outboxes %v, want only %s", c.Outboxes, ob.Table.Name())
	}
	if n := ob.Count(`state = 'dead'`); n != 1 {
		t.Errorf("%d dead rows in the table, want 1", n)
	}
}

// declare makes the scenarios' broker side: a fanout exchange the relay
// publishes to, and a topic exchange behind it that routes "good.#" to
// queue and "lost.#" nowhere.
func declare(t *testing.T) (exchange, queue string) {
	t.Helper()
	exchange, router, queue := testenv.Name(t, "observed"), testenv.Name(t, "router"), testenv.Name(t, "observedq")
	testenv.CleanupExchanges(t, exchange, router)
	testenv.CleanupQueues(t, queue)
	ch := testenv.Channel(t)
	for _, err := range []error{
		ch.ExchangeDeclare(exchange, "fanout", true, false, false, false, nil),
		ch.ExchangeDeclare(router, "topic", true, false, false, false, nil),
		ch.ExchangeBind(router, "#", exchange, false, nil),
		func() error { _, err := ch.QueueDeclare(queue, true, false, false, false, nil); return err }(),
		ch.QueueBind(queue, "good.#", router, false, nil),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	return exchange, queue
}

// publish writes good events that reach the scenario's queue, then one
// that no queue is bound for.
func publish(t *testing.T, ob *testenv.OutboxTable, good int) {
	t.Helper()
	for i := range good {
		ev := testenv.OutboxEvent(fmt.Sprintf("%s-good-%d", t.Name(), i))
		ev.Type = "good.created"
		ob.Publish(ev)
	}
	lost := testenv.OutboxEvent(t.Name() + "-unroutable")
	lost.Type = "lost.created"
	ob.Publish(lost)
}

// panicker is an Observer, and a BlockObserver, whose every method panics.
type panicker struct{}

func (panicker) Woken(string, bool)                  { panic("observer bug: Woken") }
func (panicker) Published(string, relay.Publication) { panic("observer bug: Published") }
func (panicker) Dead(string, int)                    { panic("observer bug: Dead") }
func (panicker) OutboxStats(string, outbox.Stats)    { panic("observer bug: OutboxStats") }
func (panicker) Blocked(string, string)              { panic("observer bug: Blocked") }
func (panicker) Unblocked(string)                    { panic("observer bug: Unblocked") }

// RunPanicking is the scenario of an Observer whose every method panics:
// the relay must log it and go on, as if it had no Observer. Before the
// relays recovered it, the first panic came between the broker's confirm
// and the settle: the process ended (this test binary with it) and a
// restarted relay published the batch again. Every good event must reach
// its queue exactly once, the unroutable one must become dead (its Dead
// report panics too, after the mark is committed), and the log must say
// which method panicked.
func RunPanicking(t *testing.T, ob *testenv.OutboxTable, start Start) {
	t.Helper()
	const good = 5
	exchange, queue := declare(t)
	logs := &testenv.LogBuffer{}
	start(Settings{Exchange: exchange, Observer: panicker{}, MaxAttempts: 2,
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	publish(t, ob, good)

	testenv.WaitFor(t, 90*time.Second, "every row settled: nothing pending, the unroutable one dead", func() bool {
		return ob.Count(`state = 'pending'`) == 0 && ob.Count(`state = 'dead'`) == 1
	})
	if n := testenv.QueueDepth(t, testenv.Channel(t), queue); n != good {
		t.Errorf("%d messages in the queue, want %d: each good event exactly once", n, good)
	}
	for _, want := range []string{"the Observer panicked", "method=Published", `panic="observer bug: Published"`} {
		if !logs.Has(want) {
			t.Errorf("the relay's log does not say %q:\n%s", want, logs)
		}
	}
}

// RunPlaneProperties is the scenario of the PlaneProperties setting: the
// message carries exactly the properties Plane's publisher sets
// (persistent, application/json, utf-8, the time of publishing) and no
// others, and its body is the event.
func RunPlaneProperties(t *testing.T, ob *testenv.OutboxTable, start Start) {
	t.Helper()
	exchange, queue := declare(t)
	logs := &testenv.LogBuffer{}
	start(Settings{Exchange: exchange, MaxAttempts: 1, PlaneProperties: true,
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	before := time.Now().Truncate(time.Second)
	ev := testenv.OutboxEvent(t.Name() + "-plane")
	ev.Type = "good.created"
	ob.Publish(ev)
	// A row that dies is named in the log by its event id, which the
	// message no longer carries as message_id.
	lost := testenv.OutboxEvent(t.Name() + "-unroutable")
	lost.Type = "lost.created"
	ob.Publish(lost)
	testenv.WaitFor(t, 60*time.Second, "the unroutable row dead", func() bool { return ob.Count(`state = 'dead'`) == 1 })
	testenv.WaitFor(t, 10*time.Second, "the dead row's log line", func() bool {
		return strings.Contains(logs.String(), "is dead") && strings.Contains(logs.String(), "event_id="+lost.ID)
	})
	ch := testenv.Channel(t)
	testenv.WaitFor(t, 60*time.Second, "the event in the queue", func() bool { return testenv.QueueDepth(t, ch, queue) == 1 })
	after := time.Now()
	msgs := testenv.Drain(t, testenv.AMQPConn(t), queue)
	if len(msgs) != 1 {
		t.Fatalf("%d messages in the queue, want 1", len(msgs))
	}
	d := msgs[0]
	want := amqp.Publishing{DeliveryMode: amqp.Persistent, ContentType: "application/json", ContentEncoding: "utf-8", Timestamp: d.Timestamp, Body: d.Body}
	if got := testenv.AsPublishing(d); !reflect.DeepEqual(got, want) {
		t.Errorf("published with\n %+v\nwant Plane's properties and no others\n %+v", got, want)
	}
	if d.Timestamp.Before(before) || d.Timestamp.After(after) {
		t.Errorf("timestamp %v, want the time of publishing (%v..%v)", d.Timestamp, before, after)
	}
	if got, err := warren.DecodeEvent(d.Body); err != nil || got.ID != ev.ID {
		t.Errorf("body decodes to %q, %v; want event %s", got.ID, err, ev.ID)
	}
}
