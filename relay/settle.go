package relay

// The settle side: every verdict of a batch recorded in fenced statements.

import (
	"cmp"
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/warrenmq/warren/internal/amqpx"
	"github.com/warrenmq/warren/internal/outboxsql"
	"github.com/warrenmq/warren/internal/redact"
	"github.com/warrenmq/warren/outbox"
)

// settleMinTimeout is the least time one settle attempt gets.
const settleMinTimeout = 5 * time.Second

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// settle records every verdict of a batch in at most three fenced
// statements sent in one round trip, retrying while the lease lasts. If
// it cannot, the rows are claimed again after their lease: published
// twice, never lost.
func (r *Relay) settle(ctx context.Context, pool *pgxpool.Pool, s *statements, rows []claimed, results []result, leaseEnd time.Time) {
	var ok, giveBack fence
	var bad failures
	var notSent int // released rows whose publish failed through no fault of theirs
	var notSentErr error
	for i, c := range rows {
		res := results[i]
		switch res.outcome {
		case delivered:
			ok.add(c)
		case released:
			giveBack.add(c)
			if res.err != nil {
				notSent++
				notSentErr = cmp.Or(notSentErr, res.err)
			}
		case failed, rejected:
			// Redacted before it is written: last_error leaves the
			// process, into Postgres and `warren outbox dead`.
			res.err = redact.Error(res.err, r.cfg.AMQPURL, r.cfg.DatabaseURL)
			lo := r.cfg.RetryMin
			if res.outcome == rejected && !s.canDie {
				// A Plane table without warren's columns has no dead
				// state: the row is retried at the slowest pace, and said
				// loudly each time.
				lo = r.cfg.RetryMax
				r.log.Error("outbox row cannot be published and cannot be made dead on Plane's table without warren's columns ('warren outbox migrate --schema plane'); it is retried after RetryMax",
					"event_id", c.Event.ID, "event_type", c.Event.Type, "retry_max", r.cfg.RetryMax, "error", res.err)
			}
			bad.add(c, res, lo, r.cfg.RetryMax)
		}
	}
	if len(ok.ids)+len(giveBack.ids)+len(bad.ids) == 0 {
		return
	}
	if len(bad.ids) > 0 {
		r.log.Warn("rows not delivered", "count", len(bad.ids), "first_event_id", bad.eventIDs[0], "first_error", bad.errs[0])
	}
	if notSent > 0 {
		r.log.Warn("rows not sent to the broker, or blocked by it; released with their attempt given back", "count", notSent, "first_error", notSentErr)
	}
	// Retries stop at the lease's end, but one attempt is always made: the
	// fence makes a late settle safe, and one that lands spares a
	// duplicate when nobody has reclaimed the rows yet.
	sctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), later(leaseEnd, time.Now().Add(settleMinTimeout)))
	defer cancel()
	retry := amqpx.NewBackOff(time.Second)
	for retried := false; ; retried = true {
		dead, err := r.sendSettle(sctx, pool, s, &ok, &giveBack, &bad, retried)
		if err == nil {
			r.observeDead(dead)
			return
		}
		wait := retry.NextBackOff()
		if time.Now().Add(wait).After(leaseEnd) {
			r.log.Error("could not settle claimed rows before their lease ends; they will be published again",
				"delivered", len(ok.ids), "failed", len(bad.ids), "released", len(giveBack.ids), "error", redact.Error(err, r.cfg.DatabaseURL))
			return
		}
		r.log.Warn("settle failed, will retry", "error", redact.Error(err, r.cfg.DatabaseURL), "retry_in", wait.Round(time.Millisecond))
		sleep(sctx.Done(), wait)
	}
}

// sendSettle reports how many failed rows became dead. retried says an
// earlier attempt failed, possibly after it committed.
func (r *Relay) sendSettle(ctx context.Context, pool *pgxpool.Pool, s *statements, ok, giveBack *fence, bad *failures, retried bool) (dead int, err error) {
	// Deleting (or marking delivered) comes only after the broker's
	// confirm: the confirm is the durable copy that replaces the row.
	var b pgx.Batch
	queueAsyncCommit(&b)
	if len(ok.ids) > 0 {
		q := s.settleDelete
		if r.cfg.KeepDelivered {
			q = s.settleKeep
		}
		b.Queue(q, ok.ids, ok.claims).Exec(func(tag pgconn.CommandTag) error {
			// After an attempt whose reply was lost, rows it settled
			// before the loss are missing too: only a first attempt can
			// tell rows claimed again.
			if lost := len(ok.ids) - int(tag.RowsAffected()); lost > 0 && !retried {
				r.log.Warn("delivered rows had been claimed again before they were settled (lease too short?); they may be published twice", "count", lost)
			}
			return nil
		})
	}
	if len(bad.ids) > 0 {
		args := []any{bad.ids, bad.claims, bad.errs, bad.delays, bad.permanent, r.cfg.MaxAttempts}
		switch {
		case s.plane && s.canDie:
			args = args[:5] // MaxAttempts is rendered into the statement
		case s.plane:
			args = []any{bad.ids, bad.claims, bad.delays}
		}
		b.Queue(s.settleFailure, args...).Query(func(rows pgx.Rows) error {
			var (
				id       int64
				eventID  string
				state    string
				attempts int
			)
			_, err := pgx.ForEachRow(rows, []any{&id, &eventID, &state, &attempts}, func() error {
				if outbox.State(state) == outbox.Dead {
					dead++
					r.log.Error("outbox row is dead", "event_id", eventID, "attempts", attempts, "error", bad.errorOf(id))
				}
				return nil
			})
			return err
		})
	}
	if len(giveBack.ids) > 0 {
		b.Queue(s.release, giveBack.ids, giveBack.claims, r.outbox.Channel())
	}
	err = pool.SendBatch(ctx, &b).Close() // runs the callbacks that count dead
	return dead, err
}

func (r *Relay) observeWake(byNotify bool) {
	if r.cfg.Observer != nil {
		r.observe.Call("Woken", func() { r.cfg.Observer.Woken(r.cfg.Table, byNotify) })
	}
}

func (r *Relay) observeDead(n int) {
	if r.cfg.Observer != nil && n > 0 {
		r.observe.Call("Dead", func() { r.cfg.Observer.Dead(r.cfg.Table, n) })
	}
}

// fence lists claimed rows by (id, claims), the key every settle
// statement matches on.
type fence struct{ ids, claims []int64 }

func (f *fence) add(c claimed) {
	f.ids = append(f.ids, c.ID)
	f.claims = append(f.claims, c.Claims)
}

type failures struct {
	fence
	eventIDs  []string
	errs      []string
	delays    []float64 // seconds
	permanent []bool
}

func (f *failures) add(c claimed, res result, lo, hi time.Duration) {
	f.fence.add(c)
	f.eventIDs = append(f.eventIDs, c.Event.ID)
	f.errs = append(f.errs, outboxsql.ErrorText(res.err.Error()))
	f.delays = append(f.delays, retryDelay(c.Attempts, lo, hi).Seconds())
	f.permanent = append(f.permanent, res.outcome == rejected)
}

func (f *failures) errorOf(id int64) string {
	for i, x := range f.ids {
		if x == id {
			return f.errs[i]
		}
	}
	return ""
}
