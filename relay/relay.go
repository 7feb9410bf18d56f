package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/trace"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/internal/amqpx"
	"github.com/warrenmq/warren/internal/observeguard"
	"github.com/warrenmq/warren/internal/redact"
	"github.com/warrenmq/warren/outbox"
	"github.com/warrenmq/warren/relay/internal/engine"
)

// tracerName names the relay's spans' instrumentation scope.
const tracerName = "github.com/warrenmq/warren/relay"

// Relay moves events from an outbox table to a RabbitMQ exchange. Any
// number of relays may run on one table at once, in one process or many.
type Relay struct {
	cfg     Config
	enc     engine.Encoding
	outbox  *outbox.Table
	poolCfg *pgxpool.Config // nil when cfg.Pool is set
	// sql are the statements a cycle runs, loaded once per cycle so that
	// a batch is claimed and settled by one set. On a Plane table they
	// are replaced when warren's optional columns appear
	// (noticePlaneMigration).
	sql     atomic.Pointer[statements]
	log     *slog.Logger
	observe *observeguard.Guard // runs every call to cfg.Observer
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
	reading     func()                  // as each reading of the HoldBack queues begins
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
	enc := engine.Encoding{Envelope: warren.Encoder{Format: cfg.Format, Publisher: cfg.Publisher}, CloudEvents: cfg.CloudEvents}
	if cfg.Schema == outbox.SchemaPlane {
		// Plane's rows have no version; Plane's envelope says the
		// publisher's (1.0), and a CloudEvent of the same row must too,
		// or the consumers' contracts (contract/plane, at 1.0) would not
		// apply to it.
		enc.DefaultVersion = cfg.Publisher.Version
	}
	r := &Relay{
		cfg:    cfg,
		enc:    enc,
		outbox: ob,
		log:    cfg.Logger.With("relay", cfg.Name, "outbox", cfg.Table, "exchange", cfg.Exchange),
		wake:   newWakeup(),
		health: newHealth(cfg),
	}
	r.observe = observeguard.New(r.log)
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
	defer r.release()
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
	if r.cfg.Observer != nil && r.cfg.StatsInterval > 0 {
		listener.Go(func() {
			engine.ReportStats(listenCtx, r.outbox, pool, r.cfg.StatsInterval, func(s outbox.Stats) {
				r.observe.Call("OutboxStats", func() { r.cfg.Observer.OutboxStats(r.cfg.Table, s) })
			}, r.log)
		})
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
	if r.cfg.HoldBack != nil {
		// Read before the first claim: a relay that starts while a
		// queue is deep must not deepen it first.
		// A hold outlives the session it was read on: the next one reads
		// the queues before it claims, and lets go only at LowWater, so a
		// lost connection neither deepens a queue nor restarts the
		// hold's clock (HeldSince, the alert's five minutes). Run lets
		// go when it returns.
		w := &queueWatch{r: r, conn: conn}
		if !w.readWithin(sessionCtx, amqpx.SetupTimeout) {
			lose(errors.New("hold back: the first reading of the watched queues took longer than " + amqpx.SetupTimeout.String()))
		} else {
			wg.Go(func() { w.run(sessionCtx, lose) })
		}
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
	r.observe.ObserveBlocked(r.cfg.Observer, r.cfg.Table, blocked, reason)
}

func closeError(e *amqp.Error) error {
	if e == nil {
		return amqpx.ErrClosed
	}
	return e
}
