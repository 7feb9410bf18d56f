package relay

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/trace"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/internal/amqpx"
	"github.com/warrenmq/warren/internal/redact"
	"github.com/warrenmq/warren/internal/tracecontext"
	"github.com/warrenmq/warren/outbox"
)

// Relay moves events from an outbox table to a RabbitMQ exchange. Any
// number of relays may run on one table at once, in one process or many.
type Relay struct {
	cfg     Config
	outbox  *outbox.Table
	poolCfg *pgxpool.Config // nil when cfg.Pool is set
	// sql are the statements a cycle runs, loaded once per cycle so that
	// a batch is claimed and settled by one set. On a Plane table they
	// are replaced when warren's optional columns appear
	// (noticePlaneMigration).
	sql     atomic.Pointer[statements]
	log     *slog.Logger
	wake    wakeup
	running atomic.Bool
	hooks   hooks
	// nacks: the current broker session's streak of nacked publishes,
	// which ends the session once it spans amqpx.NackedSessionLimit; one
	// nack followed by silence spans nothing (see amqpx.NackStreak).
	nacks amqpx.NackStreak

	// lastTakeover is when a claim last looked for lapsed claims on a
	// Plane table (Unix nanoseconds; 0: look at the next claim).
	lastTakeover atomic.Int64
	// takeoverFailures counts the searches for lapsed claims that failed
	// in a row.
	takeoverFailures atomic.Int32
	health           *healthState
	tracer           trace.Tracer // nil without Config.TracerProvider
}

// hooks let tests act at exact points of the relay's work. All are nil
// outside tests.
type hooks struct {
	afterClaim  func(rows []outbox.Row) // between a committed claim and the first publish
	afterSettle func()                  // after a claimed batch was settled (or given up on)
	listening   func()                  // after each successful LISTEN
	connected   func()                  // after each broker session is set up
}

// ErrAlreadyRunning is returned by Run when the relay is running or has
// run: a Relay runs once.
var ErrAlreadyRunning = errors.New("relay: Run called twice")

// New checks cfg and returns a relay ready to Run. It does no I/O.
func New(cfg Config) (*Relay, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	ob, err := outbox.Open(cfg.Table, outbox.Options{Schema: cfg.Schema, Lease: cfg.Lease})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	sql := renderStatements(ob.Name())
	if cfg.Schema == outbox.SchemaPlane {
		// Replaced by Run once it knows whether warren's columns are there.
		sql = renderPlaneStatements(ob, cfg.MaxAttempts, false)
	}
	if cfg.OrderByEntity {
		sql.claim = sql.claimOrdered
	}
	r := &Relay{
		cfg:    cfg,
		outbox: ob,
		log:    cfg.Logger.With("relay", cfg.Name, "outbox", cfg.Table, "exchange", cfg.Exchange),
		wake:   newWakeup(),
		health: newHealth(cfg),
	}
	r.sql.Store(&sql)
	if cfg.TracerProvider != nil {
		r.tracer = cfg.TracerProvider.Tracer(tracerName)
	}
	if cfg.Pool == nil {
		pc, err := pgxpool.ParseConfig(cfg.DatabaseURL)
		if err != nil {
			return nil, fmt.Errorf("%w: DatabaseURL: %s", ErrInvalidConfig, redact.Error(err, cfg.DatabaseURL))
		}
		if pc.ConnConfig.RuntimeParams["application_name"] == "" {
			pc.ConnConfig.RuntimeParams["application_name"] = cfg.Name
		}
		r.poolCfg = pc
	}
	return r, nil
}

// Name returns the relay's name (Config.Name after defaults).
func (r *Relay) Name() string { return r.cfg.Name }

// Outbox returns the table the relay reads.
func (r *Relay) Outbox() *outbox.Table { return r.outbox }

// Run relays events until ctx ends, then stops gracefully: publishes
// already sent are waited for and settled, and rows claimed but not yet
// published are released for the next relay at once, their attempt not
// counted. It returns nil after a graceful stop.
//
// Losing the broker or Postgres does not end Run: it reconnects with
// backoff, and rows wait in the table meanwhile. Run returns an error
// only when it cannot work at all: the table is missing or at another
// schema version (wrapping [outbox.ErrSchema]), or the broker refused the
// credentials or the vhost of AMQPURL before it ever let the relay in,
// which waiting does not mend (refused later, the relay keeps trying and
// logs an error). Run may be called once; a second call returns
// [ErrAlreadyRunning].
func (r *Relay) Run(ctx context.Context) error {
	if !r.running.CompareAndSwap(false, true) {
		return ErrAlreadyRunning
	}
	r.health.running.Store(true)
	defer r.health.running.Store(false)
	pool := r.cfg.Pool
	if pool == nil {
		p, err := pgxpool.NewWithConfig(ctx, r.poolCfg)
		if err != nil {
			return fmt.Errorf("relay: open pool for %s: %s", redact.URL(r.cfg.DatabaseURL), redact.Error(err, r.cfg.DatabaseURL))
		}
		defer p.Close()
		pool = p
	}
	plane, err := r.waitForSchema(ctx, pool)
	if err != nil || ctx.Err() != nil {
		return err
	}
	if r.cfg.Schema == outbox.SchemaPlane {
		sql := renderPlaneStatements(r.outbox, r.cfg.MaxAttempts, plane.Migrated)
		r.sql.Store(&sql)
		if !plane.Migrated {
			r.log.Warn("Plane's outbox table lacks warren's optional columns: rows have no attempt count and cannot be dead, so a row that can never be published is retried every RetryMax, logged at Error each time; lapsed claims are looked for every Lease/2; 'warren outbox dead' and 'redrive' do not work. Run 'warren outbox migrate --schema plane' to add them; this relay notices them within Lease/2",
				"retry_max", r.cfg.RetryMax, "lease", r.cfg.Lease)
		}
	}
	r.log.Info("relay started", "amqp_url", amqpx.RedactURLs(r.cfg.AMQPURL), "database_url", redact.URL(r.cfg.DatabaseURL), "schema", r.cfg.Schema,
		"batch_size", r.cfg.BatchSize, "workers", r.cfg.Workers, "lease", r.cfg.Lease, "keep_delivered", r.cfg.KeepDelivered || r.cfg.Schema == outbox.SchemaPlane,
		"order_by_entity", r.cfg.OrderByEntity)

	listenCtx, stopListening := context.WithCancel(ctx)
	var listener sync.WaitGroup
	if !r.cfg.DisableListen {
		listener.Go(func() { r.listen(listenCtx, pool) })
	}
	if r.cfg.Observer != nil {
		listener.Go(func() { r.reportStats(listenCtx, pool) })
	}
	// Said when the stop begins, not only when it ends, so a stop that
	// takes long (a publish waiting for its verdict) shows in the log.
	// Run waits for that line before it returns: the caller may close the
	// log's writer as soon as Run is done.
	stopLogged := make(chan struct{})
	stopSeen := context.AfterFunc(ctx, func() {
		defer close(stopLogged)
		r.log.Info("relay stopping: finishing publishes in flight", "publish_timeout", r.cfg.PublishTimeout)
	})
	defer func() {
		if !stopSeen() {
			<-stopLogged
		}
	}()
	err = r.runBroker(ctx, pool)
	stopListening()
	listener.Wait()
	if err != nil {
		return err
	}
	r.log.Info("relay stopped")
	return nil
}

// waitForSchema checks the table until Postgres answers. A wrong schema
// is final; an unreachable database is waited out. On a Plane table it
// says whether warren's optional columns are there.
func (r *Relay) waitForSchema(ctx context.Context, pool *pgxpool.Pool) (outbox.PlaneSchema, error) {
	b := amqpx.NewBackOff(r.cfg.ReconnectMaxDelay)
	for {
		var plane outbox.PlaneSchema
		var err error
		if r.cfg.Schema == outbox.SchemaPlane {
			plane, err = r.outbox.CheckPlane(ctx, pool)
		} else {
			err = r.outbox.CheckSchema(ctx, pool)
		}
		switch {
		case err == nil || errors.Is(err, outbox.ErrSchema):
			return plane, err
		case ctx.Err() != nil:
			return plane, nil // stopped while starting: a clean stop, not a failure
		}
		wait := b.NextBackOff()
		r.log.Warn("postgres unreachable, will retry", "error", redact.Error(err, r.cfg.DatabaseURL), "retry_in", wait.Round(time.Millisecond))
		if !sleep(ctx.Done(), wait) {
			return plane, nil
		}
	}
}

// runBroker keeps a broker session up until ctx ends, or the broker
// refuses the relay's credentials or vhost (amqpx.ErrRefused) at the
// start, which no reconnect mends: that error is returned. Refused after
// it let the relay in (a password rotated under it, an auth backend
// failing), the relay keeps trying.
func (r *Relay) runBroker(ctx context.Context, pool *pgxpool.Pool) error {
	dial := amqpx.NewBackOff(r.cfg.ReconnectMaxDelay)
	pause := amqpx.NewBackOff(r.cfg.ReconnectMaxDelay)
	for connected := false; ; connected = true {
		conn, err := amqpx.DialRetry(ctx, r.cfg.AMQPURL, amqpx.DialOptions{Name: r.cfg.Name}, dial, r.log)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if !connected {
				return err // refused
			}
			wait := pause.NextBackOff()
			r.log.Error("the broker refuses the relay it let in before; retrying", "error", err, "retry_in", wait.Round(time.Millisecond))
			if !sleep(ctx.Done(), wait) {
				return nil
			}
			continue
		}
		// The block state follows the connection: watched from the dial,
		// so a block during set-up is seen, to the close, which resets it.
		var watcher sync.WaitGroup
		watcher.Go(amqpx.WatchBlocked(conn, &r.health.block, r.blockChanged))
		started := time.Now()
		err = r.session(ctx, conn, pool)
		amqpx.CloseConnection(conn, amqpx.CloseTimeout)
		watcher.Wait()
		if ctx.Err() != nil {
			return nil
		}
		// A session that fails at once (the exchange cannot be declared)
		// must not turn into a reconnect loop at full speed.
		if time.Since(started) > r.cfg.ReconnectMaxDelay {
			pause.Reset()
		}
		wait := pause.NextBackOff()
		r.log.Warn("broker session ended, reconnecting", "error", err, "retry_in", wait.Round(time.Millisecond))
		if !sleep(ctx.Done(), wait) {
			return nil
		}
	}
}

// session declares the exchange, opens a confirming publisher and runs the
// workers until ctx ends or the publisher's channel closes. Every round
// trip to the broker has a deadline: the set-up gets SetupTimeout (and
// ends with ctx), the publisher's close CloseTimeout, after which the
// connection is closed under them. A broker that stops reading the
// connection (an alarm) cannot hold up a stop.
func (r *Relay) session(ctx context.Context, conn *amqp.Connection, pool *pgxpool.Pool) error {
	var pub *amqpx.Publisher
	setupCtx, cancel := context.WithTimeout(ctx, amqpx.SetupTimeout)
	err := amqpx.Bound(setupCtx, conn, func() error {
		if err := amqpx.DeclareFanout(conn, r.cfg.Exchange); err != nil {
			return err
		}
		var err error
		pub, err = amqpx.NewPublisher(setupCtx, conn, r.cfg.MaxInFlight)
		return err
	})
	cancel()
	if err != nil {
		return err
	}
	defer pub.Close()

	sessionCtx, lose := context.WithCancelCause(ctx)
	defer lose(nil)
	r.nacks.Reset()
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(amqpx.NackedSessionLimit / 5)
		defer tick.Stop()
		for {
			select {
			case e := <-pub.NotifyClose():
				lose(fmt.Errorf("publish channel closed: %w", closeError(e)))
				return
			case <-sessionCtx.Done():
				return
			case now := <-tick.C:
				if d, stale := r.nacks.Stale(now, amqpx.NackedSessionLimit); stale {
					lose(fmt.Errorf("every publish nacked to one destination for %v, none confirmed: a new session (a channel that first published to a quorum queue during its leader election stays refused)", d.Round(time.Millisecond)))
					return
				}
			}
		}
	})
	r.log.Info("connected to broker", "node", conn.RemoteAddr().String())
	r.health.brokerUp.Store(true)
	defer r.health.brokerUp.Store(false)
	if r.hooks.connected != nil {
		r.hooks.connected()
	}
	for i := range r.cfg.Workers {
		wg.Go(func() { r.work(sessionCtx, pool, pub, &r.health.beats[i]) })
	}
	wg.Wait()
	if ctx.Err() != nil {
		return nil
	}
	return context.Cause(sessionCtx)
}

// blockChanged reports the broker's connection.blocked and unblocked,
// recorded in r.health.block, which the claim gate waits on.
func (r *Relay) blockChanged(blocked bool, reason string) {
	switch {
	case blocked:
		r.log.Warn("the broker blocked the connection (an alarm); claiming stops until it lifts, and rows keep their attempts", "reason", reason)
	case reason == "":
		r.log.Info("the broker unblocked the connection; claiming resumes")
	}
	r.observeBlocked(blocked, reason)
}

func closeError(e *amqp.Error) error {
	if e == nil {
		return amqpx.ErrClosed
	}
	return e
}

// work is one claim–publish–settle loop. It stops claiming when ctx ends;
// the cycle under way finishes first. It stamps beat at every turn, so
// Health can tell a stuck loop.
func (r *Relay) work(ctx context.Context, pool *pgxpool.Pool, pub *amqpx.Publisher, beat *atomic.Int64) {
	defer beat.Store(0)
	poll := r.cfg.PollMin
	dbRetry := amqpx.NewBackOff(r.cfg.ReconnectMaxDelay)
	for ctx.Err() == nil {
		beat.Store(time.Now().UnixNano())
		if lifted := r.health.block.Lifted(); lifted != nil {
			// The broker refuses every publisher until its alarm clears: a
			// claim now would only spend the rows' attempts. Come round
			// every PollMax all the same, to show the loop is not stuck.
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
			c.Row, err = outbox.ScanRow(rows, prefix...)
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
		msg, err := r.encode(c)
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
		ends[j] = r.traceMessage(pctx, rows[index[j]], &out[j].Msg)
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
			r.cfg.Observer.Published(r.cfg.Table, Publication{InsertedAt: c.InsertedAt, Took: time.Since(start), Err: err})
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

// encode builds the message; an error means no attempt can succeed.
func (r *Relay) encode(c claimed) (amqp.Publishing, error) {
	if c.DecodeErr != nil {
		return amqp.Publishing{}, c.DecodeErr
	}
	msg, err := amqpx.EncodedPublishing(warren.Encoder{Format: r.cfg.Format, Publisher: r.cfg.Publisher}, c.Event, c.ID)
	if err != nil {
		return amqp.Publishing{}, err
	}
	if len(msg.Body) > r.cfg.MaxMessageBytes {
		return amqp.Publishing{}, fmt.Errorf("encoded event is %d bytes, more than MaxMessageBytes (%d)", len(msg.Body), r.cfg.MaxMessageBytes)
	}
	// The row's trace context is carried as headers (traceMessage, or a
	// span's shorter one): a tracestate written by SQL may be any size,
	// and over frame_max it would close the connection in every attempt.
	probe := msg
	probe.Headers = tracecontext.Inject(maps.Clone(msg.Headers), c.TraceParent, c.TraceState)
	if err := amqpx.CheckContentHeader(probe); err != nil {
		return amqp.Publishing{}, fmt.Errorf("event %.80s with its trace context: %w", c.Event.ID, err)
	}
	return msg, nil
}

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
		r.cfg.Observer.Woken(r.cfg.Table, byNotify)
	}
}

func (r *Relay) observeBlocked(active bool, reason string) {
	o, ok := r.cfg.Observer.(BlockObserver)
	switch {
	case !ok:
	case active:
		o.Blocked(r.cfg.Table, reason)
	default:
		o.Unblocked(r.cfg.Table)
	}
}

func (r *Relay) observeDead(n int) {
	if r.cfg.Observer != nil && n > 0 {
		r.cfg.Observer.Dead(r.cfg.Table, n)
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
	f.errs = append(f.errs, outbox.ErrorText(res.err.Error()))
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
