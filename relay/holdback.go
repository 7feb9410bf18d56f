package relay

// Holding back: the relay stops claiming while a consumer's queue is too
// deep, so that the backlog waits in the outbox, on Postgres's disk, and
// not in the broker's memory. See docs/adr/028-backpressure.md.

import (
	"context"
	"errors"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/internal/amqpx"
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
// back, and one that cannot be read for another reason (an exclusive queue
// of another connection, a permission refused) holds it back, as if full;
// the relay logs both. A reading that takes longer than 30s (a broker that
// stopped reading the connection) ends the session, which starts again. A message that sits in a held queue still ages:
// a queue's message TTL shorter than a consumer's outage still expires
// (dead-letters) what the queue holds, HighWater at most.
type HoldBack struct {
	// Queues are the queues whose depth holds the relay back: those of
	// the consumers of its exchange.
	Queues []string
	// HighWater is the ready messages in one queue that stop the claims.
	HighWater int
	// LowWater is the ready messages in every queue at or below which
	// claims resume; 0 means HighWater / 2 (a relay that waited for an
	// empty queue would leave its consumer idle while it refills it; with
	// HighWater 1 it is 0, an empty queue).
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
	// holds ready messages, HighWater or more, and again when another
	// queue becomes the deepest while it is held.
	HeldBack(outbox, queue string, ready int)
	// Released is called when every queue is at LowWater or below again,
	// or Run returns. A hold outlives a lost broker connection: the next
	// session reads the queues before it claims.
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
	ch   *amqp.Channel // used by one reading at a time
	// missing are the queues found not to exist at the last reading: each
	// is logged when it goes missing, not at every reading.
	missing map[string]bool
}

// reading is one reading of the queues: the deepest, and how deep;
// unknown when no channel could be opened to read them (the connection is
// ending), which changes nothing.
type reading struct {
	queue   string
	ready   int
	unknown bool
}

// read reads every queue's depth once and tells the Observer. A queue that
// does not exist (404) holds nothing back; one that exists but cannot be
// read (an exclusive queue of another connection, a refused permission)
// counts as full: holding back is the safe side, and Health names it.
func (w *queueWatch) read() reading {
	r, h := w.r, w.r.cfg.HoldBack
	if r.hooks.reading != nil {
		r.hooks.reading()
	}
	deepest := reading{ready: -1}
	for _, q := range h.Queues {
		if w.ch == nil || w.ch.IsClosed() {
			var err error
			if w.ch, err = w.conn.Channel(); err != nil {
				w.ch = nil
				r.log.Warn("hold back: no channel to read the queues on", "error", err)
				return reading{unknown: true}
			}
		}
		// A refused passive declare closes the channel: the next queue
		// gets a new one.
		st, err := w.ch.QueueDeclarePassive(q, false, false, false, false, nil)
		var amqpErr *amqp.Error
		switch {
		case errors.As(err, &amqpErr) && amqpErr.Code == amqp.NotFound:
			if !w.missing[q] {
				r.log.Warn("hold back: a watched queue does not exist; it holds nothing back until it does", "queue", q)
				if w.missing == nil {
					w.missing = map[string]bool{}
				}
				w.missing[q] = true
			}
			continue
		case err != nil:
			r.log.Warn("hold back: cannot read a watched queue's depth; it holds the relay back until it can be read", "queue", q, "error", err)
			st.Messages = h.HighWater
		}
		if err == nil && w.missing[q] {
			delete(w.missing, q)
			r.log.Info("hold back: a watched queue exists again", "queue", q)
		}
		if o, ok := r.cfg.Observer.(QueueObserver); ok && err == nil {
			r.observe.Call("QueueDepth", func() { o.QueueDepth(r.cfg.Table, q, st.Messages, st.Consumers) })
		}
		if st.Messages > deepest.ready {
			deepest = reading{queue: q, ready: st.Messages}
		}
	}
	return deepest
}

// readWithin reads the queues and applies the reading, unless ctx ends or
// the reading takes longer than limit first: a broker that stops reading
// the connection (an alarm) would hold a passive declare, and with it the
// session's end, for as long as the alarm lasts. A reading given up on
// ends when the connection is closed; it applies nothing then.
func (w *queueWatch) readWithin(ctx context.Context, limit time.Duration) bool {
	done := make(chan reading, 1)
	go func() { done <- w.read() }()
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case got := <-done:
		if ctx.Err() == nil && !got.unknown {
			w.r.hold(got.queue, got.ready)
		}
		return true
	case <-ctx.Done():
	case <-t.C:
	}
	return false
}

// run reads the queues every Interval until ctx ends, or a reading takes
// longer than the setup timeout (the session then ends and starts again).
func (w *queueWatch) run(ctx context.Context, lose func(error)) {
	tick := time.NewTicker(w.r.cfg.HoldBack.Interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if !w.readWithin(ctx, amqpx.SetupTimeout) && ctx.Err() == nil {
				lose(errors.New("hold back: reading the watched queues took longer than " + amqpx.SetupTimeout.String()))
				return
			}
		}
	}
}

// hold holds the relay back when the deepest queue reached HighWater,
// names the deepest while held, and lets go at LowWater or below.
func (r *Relay) hold(queue string, ready int) {
	h := r.cfg.HoldBack
	held, by, _ := r.health.held.Blocked()
	switch {
	case !held && ready >= h.HighWater, held && ready > h.LowWater && queue != by:
		r.health.held.Set(amqp.Blocking{Active: true, Reason: queue})
		if !held {
			r.log.Warn("holding back: a consumer's queue is too deep; claims stop and the backlog waits in the outbox",
				"queue", queue, "ready", ready, "high_water", h.HighWater, "low_water", h.LowWater)
		}
		if o, ok := r.cfg.Observer.(HoldObserver); ok {
			r.observe.Call("HeldBack", func() { o.HeldBack(r.cfg.Table, queue, ready) })
		}
	case held && ready <= h.LowWater:
		r.release()
		r.log.Info("no longer holding back; claims resume", "deepest_queue", queue, "ready", ready)
	}
}

// release lets the relay go: the queues drained, or Run returns.
func (r *Relay) release() {
	if r.health.held.Reset() {
		if o, ok := r.cfg.Observer.(HoldObserver); ok {
			r.observe.Call("Released", func() { o.Released(r.cfg.Table) })
		}
	}
}
