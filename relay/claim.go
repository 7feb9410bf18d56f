package relay

// The claim side of the polling relay: the loop that claims a batch, takes
// stranded rows over and notices a Plane migration.

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/warrenmq/warren/internal/amqpx"
	"github.com/warrenmq/warren/internal/outboxsql"
	"github.com/warrenmq/warren/internal/redact"
	"github.com/warrenmq/warren/outbox"
)

// work is one claim–publish–settle loop. It stops claiming when ctx ends;
// the cycle under way finishes first. It stamps beat at every turn, so
// Health can tell a stuck loop.
func (r *Relay) work(ctx context.Context, pool *pgxpool.Pool, pub *amqpx.Publisher, beat *atomic.Int64) {
	defer beat.Store(0)
	poll := r.cfg.PollMin
	dbRetry := amqpx.NewBackOff(r.cfg.ReconnectMaxDelay)
	for ctx.Err() == nil {
		beat.Store(time.Now().UnixNano())
		lifted := r.health.block.Lifted()
		if lifted == nil {
			lifted = r.health.held.Lifted()
		}
		if lifted != nil {
			// The broker refuses every publisher until its alarm clears,
			// or a consumer's queue is too deep (HoldBack): a claim now
			// would only spend the rows' attempts, or deepen the queue.
			// Come round every PollMax all the same, to show the loop is
			// not stuck, and ping the database, so that DatabaseOK (and
			// readiness) follows it while nothing is claimed.
			// The ping is bounded as a claim is: a database that stops
			// answering makes the relay not ready, never a stuck loop
			// that a liveness probe would restart.
			pctx, cancel := context.WithTimeout(ctx, r.cfg.Lease/2)
			r.health.claimOK.Store(pool.Ping(pctx) == nil)
			cancel()
			t := time.NewTimer(r.cfg.PollMax)
			select {
			case <-ctx.Done():
			case <-lifted:
			case <-t.C:
			}
			t.Stop()
			continue
		}
		n, err := r.cycle(ctx, pool, pub)
		r.health.claimed(err == nil)
		var wait time.Duration
		switch {
		case err != nil:
			wait = dbRetry.NextBackOff()
			r.log.Warn("claim failed, will retry", "error", redact.Error(err, r.cfg.DatabaseURL), "retry_in", wait.Round(time.Millisecond))
		case n == r.cfg.BatchSize:
			dbRetry.Reset()
			poll = r.cfg.PollMin
			continue // more are probably waiting
		case n > 0:
			dbRetry.Reset()
			poll = r.cfg.PollMin
			wait = poll
		default:
			dbRetry.Reset()
			wait = poll
			poll = min(poll*2, r.cfg.PollMax)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
		case <-r.wake:
			poll = r.cfg.PollMin
			r.observeWake(true)
		case <-t.C:
			r.observeWake(false)
		}
		t.Stop()
	}
}

// claimed is a row as the claim returned it.
type claimed struct {
	outbox.Row
	exhausted bool // its attempts were spent: the claim made it dead
}

// cycle claims one batch, publishes it and settles it. It returns how many
// rows it claimed.
func (r *Relay) cycle(ctx context.Context, pool *pgxpool.Pool, pub *amqpx.Publisher) (int, error) {
	// The lease runs from the claim's transaction time; measuring from
	// before the claim keeps the settle deadline inside it.
	leaseEnd := time.Now().Add(r.cfg.Lease)
	s, rows, err := r.claimBatch(ctx, pool)
	if err != nil || len(rows) == 0 {
		return 0, err
	}
	if r.hooks.afterClaim != nil {
		plain := make([]outbox.Row, len(rows))
		for i, c := range rows {
			plain[i] = c.Row
		}
		r.hooks.afterClaim(plain)
	}
	results := r.publish(ctx, pub, rows)
	r.settle(ctx, pool, s, rows, results, leaseEnd)
	if r.hooks.afterSettle != nil {
		r.hooks.afterSettle()
	}
	return len(rows), nil
}

// claimBatch claims one batch and returns the statements that claimed it,
// which settle it too.
func (r *Relay) claimBatch(ctx context.Context, pool *pgxpool.Pool) (*statements, []claimed, error) {
	s := r.sql.Load()
	takeover := s.plane && r.takeoverDue(s)
	if takeover && !s.canDie {
		s = r.noticePlaneMigration(ctx, pool, s)
	}
	rows, err := r.claim(ctx, pool, s, takeover)
	return s, rows, err
}

// claim claims one batch with s; takeover (on a Plane table) says it
// also looks for lapsed claims.
func (r *Relay) claim(ctx context.Context, pool *pgxpool.Pool, s *statements, takeover bool) ([]claimed, error) {
	// Not cancelled by a stop: a claim that committed must be returned so
	// its rows can be released, not left leased.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.Lease/2)
	defer cancel()
	query, args := s.claim, []any{r.cfg.BatchSize, r.cfg.Lease.Seconds(), r.cfg.MaxAttempts, r.cfg.Name}
	if s.plane {
		args = args[:1] // the rest are rendered into a Plane table's statements
		if takeover {
			query = s.claimTakeover
		}
	}
	var b pgx.Batch
	queueAsyncCommit(&b)
	var out []claimed
	lapsed := 0 // rows taken over from a lapsed claim
	b.Queue(query, args...).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var c claimed
			var wasLapsed bool
			prefix := []any{&c.exhausted}
			if s.plane {
				prefix = append(prefix, &wasLapsed)
			}
			var err error
			c.Row, err = outboxsql.ScanRow[outbox.Row](rows, prefix...)
			if err != nil {
				return err
			}
			if wasLapsed {
				lapsed++
			}
			out = append(out, c)
		}
		return rows.Err()
	})
	if err := pool.SendBatch(cctx, &b).Close(); err != nil {
		if takeover && s.takeoverEvery > 0 {
			r.takeoverFailed(err)
		}
		return nil, fmt.Errorf("claim: %w", err)
	}
	if takeover {
		r.takeoverFailures.Store(0)
	}
	if lapsed > 0 {
		r.log.Info("took over lapsed claims (a relay or Plane's poller died or stalled holding them, or their retry fell due)", "count", lapsed)
	}
	if takeover && lapsed == r.cfg.BatchSize {
		// A full batch may have left lapsed claims behind (a crashed
		// poller's backlog): look again at the next claim, not after
		// another takeover interval.
		r.lastTakeover.Store(0)
	}
	return out, nil
}

// takeoverDue says whether this claim on a Plane table looks for lapsed
// claims, and if so makes the next one wait takeoverEvery: without
// warren's index that search scans the table, so one relay runs it at
// most every Lease/2, whatever its number of workers.
func (r *Relay) takeoverDue(s *statements) bool {
	every := s.takeoverEvery
	if every == 0 {
		return true
	}
	now, last := time.Now().UnixNano(), r.lastTakeover.Load()
	return now-last >= int64(every) && r.lastTakeover.CompareAndSwap(last, now)
}

// takeoverFailed handles a claim that looked for lapsed claims, without
// warren's index, and failed. takeoverDue started the interval before the
// claim ran; the first failure in a row makes the search due again at the
// next claim, so a passing fault does not leave lapsed claims stranded for
// another interval. Further failures keep the interval: the search runs in
// the same statement as the claim of new rows, and one that keeps failing
// (a scan of a huge table that outlasts the claim's timeout) must not stop
// those too. Each failure says what it means and what cures it.
func (r *Relay) takeoverFailed(err error) {
	if r.takeoverFailures.Add(1) == 1 {
		r.lastTakeover.Store(0)
	}
	r.log.Error("the search for lapsed claims failed: rows that a dead relay or Plane's poller left claimed stay stranded until it succeeds. Without warren's lapsed-claim index it scans Plane's whole table; run 'warren outbox migrate --schema plane' for its index",
		"consecutive_failures", r.takeoverFailures.Load(), "error", redact.Error(err, r.cfg.DatabaseURL))
}

// noticePlaneMigration looks, before a takeover (every Lease/2), whether
// warren's optional columns have appeared on the Plane table since this
// relay started, and if so switches to the statements that use them. The
// statements without them would take dead rows (whose claimed_at stays
// set) for lapsed claims and publish them again. It returns the
// statements to use.
func (r *Relay) noticePlaneMigration(ctx context.Context, pool *pgxpool.Pool, s *statements) *statements {
	cctx, cancel := context.WithTimeout(ctx, r.cfg.Lease/2)
	defer cancel()
	ps, err := r.outbox.CheckPlane(cctx, pool)
	switch {
	case err != nil:
		r.log.Warn("could not check whether warren's optional columns are on Plane's table yet", "error", redact.Error(err, r.cfg.DatabaseURL))
		return s
	case !ps.Migrated:
		return s
	}
	migrated := renderPlaneStatements(r.outbox, r.cfg.MaxAttempts, true)
	if r.sql.CompareAndSwap(s, &migrated) {
		r.log.Info("warren's optional columns are on Plane's table now: rows count attempts and can be dead, and lapsed claims are looked for at every claim")
	}
	return r.sql.Load()
}

// queueAsyncCommit makes the batch's implicit transaction commit without
// waiting for its WAL flush (synchronous_commit off for this transaction
// only). The relay's own writes — a claim, a settle — may do so, because
// losing one in a database crash loses no event: a lost claim leaves the
// row pending and a lost settle leaves it pending or leased, so either way
// it is published again, a duplicate the consumers' dedup absorbs. Postgres
// writes the WAL in order, so a later durable commit (a producer's) makes
// every earlier one durable too. The events themselves are only ever
// written by the producer's transaction, at its own synchronous_commit.
// Without this, each wake-up cost two fsyncs that the producers' commits
// queued behind on a slow disk.
func queueAsyncCommit(b *pgx.Batch) {
	b.Queue(`SELECT set_config('synchronous_commit', 'off', true)`)
}
