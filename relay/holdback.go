package relay

// Holding back: the relay stops claiming while a consumer's queue is too
// deep, so that the backlog waits in the outbox, on Postgres's disk, and
// not in the broker's memory. See docs/adr/028-backpressure.md.

import (
	"context"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// HoldBack is [Config.HoldBack]: the relay claims nothing while one of
// Queues holds HighWater ready messages or more, and claims again once
// every one holds LowWater or fewer. Ready messages are those waiting for
// a consumer (not those delivered and unacknowledged), read with a passive
// queue.declare every Interval.
//
// What it holds back is the whole stream: every queue bound to the
// exchange waits with the deepest one, in the order the events were
// written. A queue's backlog grows past HighWater by what the relays
// publish between two readings, at most, and the claims they had under
// way (Workers × BatchSize per relay); a relay reads the queues before its
// first claim. The outbox, which has the disk for it, holds the rest. A
// queue that does not exist (not yet declared, or deleted) holds nothing
// back; the relay logs it. A message that sits in a held queue still ages:
// a queue's message TTL shorter than a consumer's outage still expires
// (dead-letters) what the queue holds, HighWater at most.
type HoldBack struct {
	// Queues are the queues whose depth holds the relay back: those of
	// the consumers of its exchange.
	Queues []string
	// HighWater is the ready messages in one queue that stop the claims.
	HighWater int
	// LowWater is the ready messages in every queue below which claims
	// resume; default HighWater / 2.
	LowWater int
	// Interval is how often the queues are read; default 1s.
	Interval time.Duration
}

// DefaultHoldBackInterval is HoldBack.Interval's default.
const DefaultHoldBackInterval = time.Second

// HoldObserver is implemented by an Observer that also wants to know when
// the relay holds back and when it lets go. The relay calls these methods
// when its Observer implements them.
type HoldObserver interface {
	// HeldBack is called when the relay stops claiming because queue
	// holds ready messages, HighWater or more.
	HeldBack(outbox, queue string, ready int)
	// Released is called when every queue is at LowWater or below again,
	// or the session the hold was read on ended.
	Released(outbox string)
}

// QueueObserver is implemented by an Observer that wants each hold-back
// queue's depth at every reading: a consumer's lag, in events.
type QueueObserver interface {
	QueueDepth(outbox, queue string, ready, consumers int)
}

// queueWatch reads the hold-back queues' depths on a channel of its own.
type queueWatch struct {
	r    *Relay
	conn *amqp.Connection
	ch   *amqp.Channel
}

// read reads every queue's depth once, holds the relay back or lets it
// go, and tells the Observer.
func (w *queueWatch) read() {
	r, h := w.r, w.r.cfg.HoldBack
	deepest, ready := "", -1
	for _, q := range h.Queues {
		if w.ch == nil || w.ch.IsClosed() {
			var err error
			if w.ch, err = w.conn.Channel(); err != nil {
				w.ch = nil
				r.log.Warn("hold back: no channel to read the queues on", "error", err)
				return
			}
		}
		// A passive declare of a missing queue closes the channel (404):
		// the next queue gets a new one.
		st, err := w.ch.QueueDeclarePassive(q, false, false, false, false, nil)
		if err != nil {
			r.log.Warn("hold back: cannot read a queue's depth; it holds nothing back", "queue", q, "error", err)
			continue
		}
		if o, ok := r.cfg.Observer.(QueueObserver); ok {
			r.observe.Call("QueueDepth", func() { o.QueueDepth(r.cfg.Table, q, st.Messages, st.Consumers) })
		}
		if st.Messages > ready {
			deepest, ready = q, st.Messages
		}
	}
	r.hold(deepest, ready, false)
}

// run reads the queues every Interval until ctx ends, then lets the relay
// go: a session without a watcher must not stay held.
func (w *queueWatch) run(ctx context.Context) {
	defer func() {
		w.r.hold("", 0, true)
		if w.ch != nil {
			w.ch.Close()
		}
	}()
	tick := time.NewTicker(w.r.cfg.HoldBack.Interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			w.read()
		}
	}
}

// hold holds the relay back when the deepest queue reached HighWater, and
// lets it go when it is at LowWater or below, or when the watcher ends.
func (r *Relay) hold(queue string, ready int, ending bool) {
	h := r.cfg.HoldBack
	held, _, _ := r.health.held.Blocked()
	switch {
	case !held && !ending && ready >= h.HighWater:
		r.health.held.Set(amqp.Blocking{Active: true, Reason: queue})
		r.log.Warn("holding back: a consumer's queue is too deep; claims stop and the backlog waits in the outbox",
			"queue", queue, "ready", ready, "high_water", h.HighWater, "low_water", h.LowWater)
		if o, ok := r.cfg.Observer.(HoldObserver); ok {
			r.observe.Call("HeldBack", func() { o.HeldBack(r.cfg.Table, queue, ready) })
		}
	case held && (ending || ready <= h.LowWater):
		r.health.held.Reset()
		r.log.Info("no longer holding back; claims resume", "deepest_queue", queue, "ready", ready)
		if o, ok := r.cfg.Observer.(HoldObserver); ok {
			r.observe.Call("Released", func() { o.Released(r.cfg.Table) })
		}
	}
}
