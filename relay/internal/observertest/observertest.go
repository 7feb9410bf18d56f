// Package observertest is the one Observer test both relays pass: the
// polling relay (package relay) and the CDC relay (package relay/cdc) tell
// a [relay.Observer] the same things about the same events, so that one
// adapter (warrenprom/relayprom) reads either. Only test code imports it.
package observertest

import (
	"fmt"
	"sync"
	"testing"
	"time"

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

// Start runs a relay on the test's table that publishes to exchange,
// with obs as its Observer, at most maxAttempts attempts per row and a
// stats interval short enough for the test.
type Start func(exchange string, obs relay.Observer, maxAttempts int)

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
	rec := &Recorder{}
	start(exchange, rec, maxAttempts)
	for i := range good {
		ev := testenv.OutboxEvent(fmt.Sprintf("%s-good-%d", t.Name(), i))
		ev.Type = "good.created"
		ob.Publish(ev)
	}
	lost := testenv.OutboxEvent(t.Name() + "-unroutable")
	lost.Type = "lost.created"
	ob.Publish(lost)

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
