package relay

// The publish side: each claimed row encoded, sent, and its verdict read.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/warrenmq/warren/internal/amqpx"
	"github.com/warrenmq/warren/relay/internal/engine"
)

// outcome is what became of one claimed row.
type outcome uint8

const (
	deadAtClaim outcome = iota // the claim made it dead; nothing to settle
	delivered                  // confirmed by the broker and not returned
	failed                     // not confirmed: retry later, dead when attempts are spent
	rejected                   // cannot be published at all: dead now
	released                   // never reached the broker (stopping, or not sent): give the attempt back
)

type result struct {
	outcome outcome
	err     error
}

// publish sends every row of the batch at once and waits for every
// verdict. Only a confirm without a return counts as delivered; a nack, a
// return, a closed channel and a timeout all leave the row in the table.
func (r *Relay) publish(ctx context.Context, pub *amqpx.Publisher, rows []claimed) []result {
	results := make([]result, len(rows))
	out := make([]amqpx.Outgoing, 0, len(rows))
	index := make([]int, 0, len(rows)) // the row of each message in out
	for i, c := range rows {
		if c.exhausted {
			r.log.Error("outbox row is dead", "event_id", c.Event.ID, "event_type", c.Event.Type, "attempts", c.Attempts, "error", c.LastError)
			r.observeDead(1) // the claim that made it dead is committed
			continue
		}
		msg, err := engine.Encode(r.enc, c.Row, r.cfg.MaxMessageBytes)
		if err != nil {
			results[i] = result{rejected, err}
			continue
		}
		if ctx.Err() != nil {
			results[i] = result{outcome: released}
			continue
		}
		out = append(out, amqpx.Outgoing{RoutingKey: c.Event.Type, Msg: msg})
		index = append(index, i)
	}
	if len(out) == 0 {
		return results
	}
	// A publish that started is not cut short by a stop: it runs to its
	// verdict so the row can be settled either way. The batch shares one
	// PublishTimeout: every message of it is handed over at once.
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.PublishTimeout)
	defer cancel()
	ends := make([]func(error), len(out)) // each message's span
	for j := range out {
		c := rows[index[j]]
		ends[j] = engine.Trace(pctx, r.tracer, r.cfg.Exchange, c.Row, c.Attempts, &out[j].Msg)
		if r.cfg.PlaneProperties {
			engine.PlaneProperties(&out[j].Msg, time.Now())
		}
	}
	start := time.Now()
	pub.PublishBatch(pctx, r.cfg.Exchange, out, func(j int, err error) {
		c := rows[index[j]]
		notSent := errors.Is(err, amqpx.ErrNotSent)
		timedOut := errors.Is(err, context.DeadlineExceeded)
		// A broker that blocked the connection stops reading it: the
		// timeout is the alarm's doing, not the row's.
		blocked := timedOut && !notSent && r.health.block.BlockedSince(start)
		switch {
		case notSent && timedOut:
			err = fmt.Errorf("no free in-flight slot within PublishTimeout (%v; MaxInFlight %d): %w", r.cfg.PublishTimeout, r.cfg.MaxInFlight, err)
		case blocked:
			err = fmt.Errorf("no confirm within PublishTimeout (%v) while the broker blocked the connection: %w", r.cfg.PublishTimeout, err)
		case timedOut:
			err = fmt.Errorf("no confirm from the broker within PublishTimeout (%v): %w", r.cfg.PublishTimeout, err)
		case errors.Is(err, amqpx.ErrNacked):
			// RabbitMQ nacks a publish that any one bound queue refused,
			// having delivered it to the others: the row may be dead, or
			// retried, though a consumer had it.
			err = fmt.Errorf("%w (it may have reached other queues bound to the exchange: one refusing queue is enough for a nack)", err)
		}
		if r.cfg.Observer != nil {
			p := Publication{InsertedAt: c.InsertedAt, Took: time.Since(start), Err: err}
			r.observe.Call("Published", func() { r.cfg.Observer.Published(r.cfg.Table, p) })
		}
		ends[j](err)
		if err == nil || errors.Is(err, amqpx.ErrNacked) {
			r.nacks.Record(amqpx.Destination(r.cfg.Exchange, out[j].RoutingKey), err != nil, time.Now())
		}
		switch {
		case err == nil:
			results[index[j]] = result{outcome: delivered}
		case notSent || blocked:
			// The broker never had the message, or refused every
			// publisher for a while: the row did nothing wrong, so its
			// attempt is given back. Released, not settled: if the
			// broker had it after all, the row is published twice,
			// never lost.
			results[index[j]] = result{released, err}
		default:
			results[index[j]] = result{failed, err}
		}
	})
	return results
}
