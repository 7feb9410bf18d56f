package cdc

// Settling: published rows trimmed and dead rows marked, in the order
// their confirms arrived, before the slot's position moves past them.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/warrenmq/warren/internal/outboxsql"
	"github.com/warrenmq/warren/internal/redact"
)

// settleLoop settles batches in order, merging those that queued up
// behind a slow commit into one transaction, until settles is closed:
// what was published before a stop is still settled. A settle that fails
// ends the session through fail; the batches behind it are dropped
// unsettled, to be streamed again by the next session.
func (r *Relay) settleLoop(ctx context.Context, settles <-chan settlement, fail context.CancelCauseFunc) {
	session := ctx
	ctx = context.WithoutCancel(ctx)
	defer func() {
		for range settles { // keep the publisher from waiting on a send
		}
	}()
	limit := (settleQueue + 1) * r.cfg.BatchSize
	for s := range settles {
		// What arrives within settleLinger joins this settle, up to the
		// rows of settleQueue+1 full batches: what one settle holds, and
		// so what a relay that dies during it has published without
		// moving the slot, stays bounded. Under a trickle of small
		// batches a trim a batch would be a transaction, and a WAL flush,
		// for every few events; the position Postgres hears of moves only
		// every StatusInterval anyway.
		linger := time.NewTimer(settleLinger)
	merge:
		for len(s.done)+len(s.dead)+r.cfg.BatchSize <= limit {
			select {
			case more, ok := <-settles:
				if !ok {
					break merge
				}
				s.done, s.dead = append(s.done, more.done...), append(s.dead, more.dead...)
				s.end, s.commit = max(s.end, more.end), max(s.commit, more.commit)
			case <-linger.C:
				break merge
			}
		}
		linger.Stop()
		if err := r.settleRetrying(session, ctx, s); err != nil {
			fail(err)
			return
		}
	}
}

// settleRetrying settles s, trying again while the session lives when
// the settle failed by waiting: a lock on the table (CREATE INDEX's SHARE
// lock among them) holding the trim past settleTimeout would otherwise
// end the session, and the next would publish every row not trimmed
// again, once for each settleTimeout the lock lasts. Trying again is
// safe: the trim and the dead marks commit together or not at all, the
// DELETE and the dead mark find only pending rows, settled_lsn only moves
// forward, and the position has not moved. Meanwhile the confirmed
// batches queue up behind it (settleQueue), and the publisher waits for
// room: nothing more is published.
//
// Any other failure (a lost connection, a server refusing connections)
// ends the session. At a shutdown PostgreSQL waits for each walsender's
// client to report as flushed every position it was sent, and ends the
// settle's connection first: a relay that tried again would hold the
// server from stopping for ever, its walsender never done. Once the
// session ends (that way or by a stop), one attempt is made and its
// error returned.
func (r *Relay) settleRetrying(session, ctx context.Context, s settlement) error {
	wait := r.cfg.RetryMin
	for {
		sctx, cancel := context.WithTimeout(ctx, settleTimeout)
		err := r.settle(sctx, s)
		cancel()
		if err == nil || session.Err() != nil || !waited(err) {
			return err
		}
		r.log.Warn("settle waited too long; trying again", "error", err, "retry_in", wait)
		select {
		case <-session.Done():
		case <-time.After(wait):
		}
		wait = min(2*wait, r.cfg.RetryMax)
	}
}

// waited reports whether a settle failed by waiting on other
// transactions: past its timeout or a statement_timeout, a lock_timeout,
// a deadlock or serialization failure.
func waited(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "57014", "55P03", "40P01", "40001": // query_canceled, lock_not_available, deadlock_detected, serialization_failure
			return true
		}
		return false
	}
	return errors.Is(err, context.DeadlineExceeded)
}

// silenceLimit is how long the reader waits for any word from the
// server, having asked for a reply after a third of it, before it ends
// the session; statusWriteTimeout bounds one status send.
const (
	silenceLimit       = 30 * time.Second
	statusWriteTimeout = 5 * time.Second
)

// settleTimeout bounds one settle, which runs on after a stop.
const settleTimeout = 10 * time.Second

// settleLinger is how long a settle waits for more confirmed batches to
// join it: less than half the default StatusInterval, so that the
// position Postgres hears of is at most one settle behind.
const settleLinger = 100 * time.Millisecond

// settleQueue is how many confirmed batches wait for the settle loop
// before the confirm loop waits for it. With the BatchesInFlight batches
// published and not yet queued here and the settle being committed (which
// merges up to settleQueue more), it bounds what a relay that dies has
// published and not settled: (BatchesInFlight + 1 + 2*settleQueue)
// batches. That is what the next relay publishes again. What it settled
// beyond the position Postgres knows (since the last status update, or
// inside a transaction the position cannot pass) comes again in the
// stream too, but its transactions are at or before the settled_lsn its
// settles recorded, so the next relay reads those rows from the table and
// finds them trimmed.
const settleQueue = 4

// settle trims the confirmed rows and marks the dead ones in one
// transaction, and only after it commits moves the flushed position: a
// position reported before the trim committed could let a crash leave a
// published row in the table for ever, never streamed again. The commit
// is synchronous for the same reason. A row the broker confirmed whose
// trim is lost is published again, never lost. The same transaction
// records the commit position of the batch's latest transaction
// (settled_lsn): the trim is the record of what was published, and the
// position tells later sessions which streamed rows to check against it.
func (r *Relay) settle(ctx context.Context, s settlement) error {
	if len(s.done) > 0 || len(s.dead) > 0 {
		ids, attempts, reasons := make([]int64, len(s.dead)), make([]int32, len(s.dead)), make([]string, len(s.dead))
		for i, d := range s.dead {
			// Redacted before it is written, as the polling relay's:
			// last_error leaves the process, into Postgres and `warren
			// outbox dead`, and an error may quote a URL (the routing key
			// is the event type, which a producer chooses).
			ids[i], attempts[i], reasons[i] = d.id, int32(d.attempts), outboxsql.ErrorText(redact.Text(d.reason, r.cfg.AMQPURL, r.cfg.DatabaseURL))
		}
		t := pgx.Identifier{r.cfg.Table}.Sanitize()
		err := pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
			b := &pgx.Batch{}
			// Whatever the role's or database's setting: a trim a crash
			// forgets after the slot moved would strand its rows.
			b.Queue(`SET LOCAL synchronous_commit = on`)
			b.Queue(trimSQL(t), s.done)
			b.Queue(markDeadSQL(t), ids, attempts, reasons)
			if s.commit != 0 {
				// In the trim's transaction: a later session reads the
				// rows of this transaction and those before it from
				// the table, where the trim shows what was published.
				b.Queue(`UPDATE `+stateTable(r.cfg.Table)+` SET settled_lsn = $2::text::pg_lsn WHERE slot = $1 AND settled_lsn < $2::text::pg_lsn`,
					r.cfg.Slot, s.commit.String())
			}
			return tx.SendBatch(ctx, b).Close()
		})
		if err != nil {
			return fmt.Errorf("settle %d published and %d dead rows: %w", len(s.done), len(s.dead), err)
		}
		// Said once the mark is committed, as the polling relay does: a
		// settle that fails is tried again, and logging before it would
		// say so once per try, or of a row that is not dead after all.
		for i, d := range s.dead {
			r.log.Error("outbox event is dead", "event_id", d.event, "id", d.id, "attempts", d.attempts, "error", reasons[i])
		}
		r.dead.Add(int64(len(s.dead)))
		if r.cfg.Observer != nil && len(s.dead) > 0 {
			n := len(s.dead)
			r.observe.Call("Dead", func() { r.cfg.Observer.Dead(r.cfg.Table, n) }) // committed: the mark is in the table
		}
		// Forgotten once the dead mark is committed, not when it is
		// decided: a batch that fails after the decision drops the mark,
		// the row comes again, and its NackTimeout must not start anew.
		for _, d := range s.dead {
			r.nackedSince.forget(d.id)
		}
	}
	if uint64(s.end) > r.flushed.Load() {
		r.flushed.Store(uint64(s.end))
	}
	return nil
}

// The settle's and the refetch's statements on the quoted table t. Each
// finds its rows by probing the primary key once per id, whatever the
// table's statistics say (TestSettleStatementsProbeThePrimaryKey). Their
// test of the state is written `(state = 'pending') IS TRUE`, which means
// the same but does not let the planner use the claim index, whose
// predicate is state = 'pending'. As a bare `state = 'pending'` beside
// `id = ANY($1)` it did: pgx prepares every statement, Postgres plans a
// prepared one generically after five runs, and on a table whose
// statistics were taken while it held few pending rows (new, or last
// analyzed while trimmed, as a CDC outbox mostly is) that plan read every
// pending row from the claim index and searched the id array for each of
// them. A trim of 1,250 ids from a 20,000-row backlog took 100 to 650 ms
// that way, and the drain ran at half its speed.
func trimSQL(t string) string {
	return `DELETE FROM ` + t + ` WHERE id = ANY($1::bigint[]) AND (state = 'pending') IS TRUE`
}

func markDeadSQL(t string) string {
	return `UPDATE ` + t + ` AS o SET state = 'dead', attempts = d.attempts, last_error = d.reason, finished_at = now()
	FROM unnest($1::bigint[], $2::int[], $3::text[]) AS d(id, attempts, reason)
	WHERE o.id = d.id AND (o.state = 'pending') IS TRUE`
}
