package cdc

// Publishing: rows from the queue sent to the broker, their confirms read
// and handed to the settle loop.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/dlq"
	"github.com/warrenmq/warren/internal/amqpx"
	"github.com/warrenmq/warren/outbox"
	"github.com/warrenmq/warren/relay"
	"github.com/warrenmq/warren/relay/internal/engine"
)

// settlement is what a batch's publish decided: the rows to trim, the rows
// to mark dead, the position the batch moves the slot to (0 for none), and
// the commit of the latest transaction its rows belong to (0 for the
// backfill's), recorded with the trim.
type settlement struct {
	done   []int64
	dead   []deadRow
	end    pglogrepl.LSN
	commit pglogrepl.LSN
}

type deadRow struct {
	id       int64
	event    string // the event's id, for the log
	attempts int
	reason   string
}

// publishLoop publishes the rows written before the slot existed, if
// they may not have been, and then the queue, a batch at a time, up to
// BatchesInFlight batches ahead of their confirms; confirmLoop awaits
// them, in the same order. Every batch sent is passed on, even in a stop:
// confirmLoop reads sent until it is closed, and a batch must be waited
// for to free its in-flight slots.
func (r *Relay) publishLoop(ctx context.Context, pub *amqpx.Publisher, q *queue, p pipeline, st slotState) error {
	// A streamed row may have been published, and trimmed, before this
	// session: it is read from the table instead, and published only if
	// it is still pending (the trim, committed after the broker's
	// confirm, is the record that it was published). Two kinds:
	//  - at or below the backfill's bound, recorded by this session's
	//    backfill or an earlier one's, a row that committed after the
	//    slot was made and that the backfill read too;
	//  - of a transaction at or before st.settled, the latest whose rows
	//    an earlier session trimmed: the slot moves only past whole
	//    transactions, so a session that ended inside one leaves it to be
	//    streamed again whole, and without this every row of it already
	//    published went out again, and a transaction longer than the
	//    sessions last was never passed.
	// Every other row (every row of a transaction no session settled
	// any of) is published as the stream has it, with no read.
	backfilled := st.backfilledTo
	if st.backfill {
		bound, err := r.backfill(ctx, pub)
		if err != nil {
			return fmt.Errorf("backfill: %w", err)
		}
		backfilled = max(backfilled, bound)
	}
	for {
		// Room first, then the queue: a batch taken after waiting for
		// room holds what the stream delivered meanwhile.
		select {
		case <-ctx.Done():
			return ctx.Err()
		case p.room <- struct{}{}:
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-q.ready:
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		items := q.take(r.cfg.BatchSize)
		if len(items) == 0 {
			<-p.room // the room taken for a batch that is not there
			continue
		}
		rows := make([]outbox.Row, 0, len(items))
		var err error
		var refetch, xids []int64
		var end, commit pglogrepl.LSN
		for i := range items {
			if items[i].row != nil && (items[i].row.ID <= backfilled || items[i].commit <= st.settled) {
				items[i].refetch = true
			}
			it := items[i]
			if it.row != nil && (len(xids) == 0 || xids[len(xids)-1] != int64(it.xid)) {
				xids = append(xids, int64(it.xid))
				commit = it.commit
			}
			switch {
			case it.row == nil:
				end = it.end
			case it.refetch:
				refetch = append(refetch, it.row.ID)
			default:
				rows = append(rows, *it.row)
			}
		}
		if err := r.waitVisible(ctx, xids); err != nil {
			return err
		}
		if len(refetch) > 0 {
			if rows, err = r.refetched(ctx, items, rows, refetch); err != nil {
				return err
			}
		}
		f := r.send(ctx, pub, rows)
		f.end, f.commit = end, commit
		p.sent <- f // never waits: room was taken for it
	}
}

// pipeline carries the batches publishLoop sent to confirmLoop, in order.
// room holds a token for each batch sent and not yet queued for its
// settle, so that at most BatchesInFlight are.
type pipeline struct {
	sent chan *inFlight
	room chan struct{}
}

// confirmLoop awaits the verdicts of the batches publishLoop sent, in
// order, and passes each one's settlement on, so that the position moves
// only past batches whose every event was confirmed or made dead. After a
// batch fails for the connection's sake, the batches behind it are not
// settled (their rows are published again from the last position): their
// contexts end at once and their verdicts are only drained. A stop that
// comes while a batch waits to publish a refused event again fails that
// batch the same way, so the batches behind it, though confirmed, are
// published again by the next relay: the position could not have moved
// past them anyway.
func (r *Relay) confirmLoop(ctx context.Context, pub *amqpx.Publisher, p pipeline, settles chan<- settlement, fail context.CancelCauseFunc) {
	failed := false
	for f := range p.sent {
		if failed {
			f.cancel()
			// Their verdicts are not settled, but they are told, and
			// their spans ended: a copy that reached the broker has a
			// consumer whose span names this one as its parent.
			f.batch.Wait(func(i int, err error) {
				r.observePublished(f.added[i], f.sent, err)
				f.ends[i](err)
			})
			<-p.room
			continue
		}
		s, err := r.confirm(ctx, pub, f)
		if err != nil {
			failed = true
			fail(err)
			<-p.room
			continue
		}
		// The settle loop runs until settles is closed, so this send
		// cannot be left waiting by a stop. The batch's room is freed
		// only once it is queued for its settle, which bounds what is
		// published and not settled.
		settles <- s
		<-p.room
	}
}

// inFlight is a batch handed to the broker whose verdicts are awaited.
type inFlight struct {
	batch  *amqpx.Batch
	cancel context.CancelFunc // ends the batch's context
	out    []amqpx.Outgoing
	ids    []int64
	added  []time.Time   // each row's InsertedAt, for the Observer
	ends   []func(error) // each row's publish span's end (engine.Trace)
	sent   time.Time     // when the batch was handed to the publisher
	dead   []deadRow     // the rows that could not be encoded
	end    pglogrepl.LSN // where the position may move once the batch is settled
	commit pglogrepl.LSN // the commit of the latest transaction of its rows
}

// deliver publishes rows in order and waits for every verdict: send and
// confirm, for the backfill, which settles a page before it reads the next.
func (r *Relay) deliver(ctx context.Context, pub *amqpx.Publisher, rows []outbox.Row) (settlement, error) {
	return r.confirm(ctx, pub, r.send(ctx, pub, rows))
}

// send encodes rows and starts publishing them, after every batch sent
// before on pub; one that cannot be encoded is dead at once. A batch that
// started is not cut short by a stop: it runs to its verdicts (or
// PublishTimeout, counted by confirm), so that it can be settled and the
// next relay need not publish it again.
func (r *Relay) send(ctx context.Context, pub *amqpx.Publisher, rows []outbox.Row) *inFlight {
	f := &inFlight{out: make([]amqpx.Outgoing, 0, len(rows)), ids: make([]int64, 0, len(rows))}
	for _, row := range rows {
		msg, err := engine.Encode(r.enc, row, r.cfg.MaxMessageBytes)
		if err != nil {
			f.dead = append(f.dead, deadRow{row.ID, row.Event.ID, 1, err.Error()})
			continue
		}
		f.ends = append(f.ends, engine.Trace(ctx, r.tracer, r.cfg.Exchange, row, 1, &msg))
		if r.cfg.PlaneProperties {
			engine.PlaneProperties(&msg, time.Now())
		}
		f.out = append(f.out, amqpx.Outgoing{RoutingKey: row.Event.Type, Msg: msg})
		f.ids = append(f.ids, row.ID)
		f.added = append(f.added, row.InsertedAt)
	}
	bctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	f.batch, f.cancel, f.sent = pub.Send(bctx, r.cfg.Exchange, f.out), cancel, time.Now()
	return f
}

// confirm waits for the verdicts of f, for at most PublishTimeout from
// when it starts waiting: the time f spent behind the batches before it
// is theirs. A row the broker refuses is published again, the batch
// waiting, until it is confirmed or dead; the batches sent after f are
// not held up, so the refused row arrives after them. A return (no queue
// bound for it) spends one of the row's MaxAttempts. A nack spends none:
// RabbitMQ nacks mostly for its own passing state (a full queue that
// rejects publishes, a quorum queue without a leader), so a nacked row
// is dead only once it has been nacked for NackTimeout, across sessions.
// When every verdict of the session has been a nack for
// amqpx.NackedSessionLimit the session ends, and the next one publishes
// on a new channel (a channel that first published to a quorum queue
// during its leader's election stays refused). A publish that fails for
// the connection's sake (closed channel, no confirm within
// PublishTimeout) fails the session too: the rows are published again
// from the last position, and no attempt is spent on them.
func (r *Relay) confirm(ctx context.Context, pub *amqpx.Publisher, f *inFlight) (settlement, error) {
	s := settlement{dead: f.dead, end: f.end, commit: f.commit}
	batch, cancel, out, ids, added, sent, ends := f.batch, f.cancel, f.out, f.ids, f.added, f.sent, f.ends
	// Every span ends at its event's final verdict in this session:
	// confirmed, dead, or left to the next session by an error.
	endAll := func(ends []func(error), err error) {
		for _, end := range ends {
			end(err)
		}
	}
	returns := make([]int, len(out)) // the returns each row has had
	wait := r.cfg.RetryMin
	for {
		var failedOut []amqpx.Outgoing
		var failedIDs []int64
		var failedReturns []int
		var failedAdded []time.Time
		var failedEnds []func(error)
		var sessionErr error
		retry := func(i, returned int) {
			failedOut, failedIDs, failedReturns = append(failedOut, out[i]), append(failedIDs, ids[i]), append(failedReturns, returned)
			failedAdded, failedEnds = append(failedAdded, added[i]), append(failedEnds, ends[i])
		}
		expire := time.AfterFunc(r.cfg.PublishTimeout, cancel)
		batch.Wait(func(i int, err error) {
			r.observePublished(added[i], sent, err)
			switch {
			case err == nil:
				s.done = append(s.done, ids[i])
				r.published.Add(1)
				r.nackedSince.forget(ids[i])
				r.nacks.Record(amqpx.Destination(r.cfg.Exchange, out[i].RoutingKey), false, time.Now())
				ends[i](nil)
			case errors.Is(err, amqpx.ErrUnroutable):
				if returns[i]+1 >= r.cfg.MaxAttempts {
					s.dead = append(s.dead, deadRow{ids[i], eventID(out[i].Msg), returns[i] + 1, err.Error()})
					ends[i](err)
					return
				}
				retry(i, returns[i]+1)
			case errors.Is(err, amqpx.ErrNacked):
				now := time.Now()
				r.nacks.Record(amqpx.Destination(r.cfg.Exchange, out[i].RoutingKey), true, now)
				if first := r.nackedSince.nacked(ids[i], now, r.cfg.NackTimeout); now.Sub(first) >= r.cfg.NackTimeout {
					s.dead = append(s.dead, deadRow{ids[i], eventID(out[i].Msg), returns[i] + 1, fmt.Sprintf("%v, for %v (NackTimeout)", err, now.Sub(first).Round(time.Millisecond))})
					ends[i](err)
					return
				}
				retry(i, returns[i])
			default:
				// The connection's failure, not the event's: the first
				// one ends the session.
				sessionErr = cmp.Or(sessionErr, err)
				ends[i](err)
			}
		})
		expire.Stop()
		cancel()
		if sessionErr != nil {
			endAll(failedEnds, sessionErr)
			return s, sessionErr
		}
		if len(failedOut) == 0 {
			return s, nil
		}
		if d, stale := r.nacks.Stale(time.Now(), amqpx.NackedSessionLimit); stale {
			endAll(failedEnds, errNackStreak)
			return s, fmt.Errorf("%w, for %v: a new session (a channel that first published to a quorum queue during its leader election stays refused)", errNackStreak, d.Round(time.Millisecond))
		}
		r.log.Warn("the broker refused events; publishing them again", "events", len(failedOut), "retry_in", wait)
		select {
		case <-ctx.Done():
			endAll(failedEnds, ctx.Err())
			return s, ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, r.cfg.RetryMax)
		out, ids, returns, added, ends = failedOut, failedIDs, failedReturns, failedAdded, failedEnds
		bctx, bcancel := context.WithCancel(context.WithoutCancel(ctx))
		batch, cancel, sent = pub.Send(bctx, r.cfg.Exchange, out), bcancel, time.Now()
	}
}

// observePublished tells the Observer, if any, of one row's verdict: the
// row was added to the batch at added and its batch sent at sent.
func (r *Relay) observePublished(added, sent time.Time, err error) {
	if r.cfg.Observer != nil {
		p := relay.Publication{InsertedAt: added, Took: time.Since(sent), Err: err}
		r.observe.Call("Published", func() { r.cfg.Observer.Published(r.cfg.Table, p) })
	}
}

// eventID is the id of the event msg carries, for the dead row's log line:
// its message_id, or, under PlaneProperties, which sends none, the body's
// event_id.
func eventID(msg amqp.Publishing) string {
	if msg.MessageId != "" {
		return msg.MessageId
	}
	id, _ := dlq.BodyEvent(msg.Body)
	return id
}
