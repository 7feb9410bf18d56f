package cdc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/internal/amqpx"
	"github.com/warrenmq/warren/internal/observeguard"
	"github.com/warrenmq/warren/internal/redact"
	"github.com/warrenmq/warren/outbox"
	"github.com/warrenmq/warren/relay/internal/engine"
)

// Relay streams an outbox table's inserts from Postgres's write-ahead log
// to RabbitMQ. See the package documentation for what it guarantees.
type Relay struct {
	cfg        Config
	pool       *pgxpool.Pool
	poolConfig *pgxpool.Config // for the relay's own pool, when Config.Pool is nil
	repl       *pgconn.Config
	log        *slog.Logger
	observe    *observeguard.Guard // runs every call to cfg.Observer
	enc        engine.Encoding
	table      *outbox.Table // for the Observer's stats
	tracer     trace.Tracer  // nil without Config.TracerProvider

	// flushed is the position before which every event is confirmed by
	// the broker and trimmed from the table (or marked dead): what the
	// relay reports to Postgres, and where a restart resumes.
	flushed atomic.Uint64

	published, dead atomic.Int64
	streaming       atomic.Bool
	health          healthState
	// nacks: since when the current session's verdicts have all been
	// nacks; nackedSince: since when each nacked event has been (see
	// confirm), kept over a session that ended on a nack streak
	// (endedOnNacks), cleared at any other session's start. Sessions run
	// one at a time, on Run's goroutine.
	nacks        amqpx.NackStreak
	nackedSince  nackLedger
	endedOnNacks bool
	// brokerLetIn: a session has logged in to the broker. A refusal
	// after that (a password rotated under the relay, an auth backend
	// failing) is retried; before it, the configuration is wrong.
	brokerLetIn bool
}

// errNackStreak ends a session whose every verdict to one destination
// (exchange and routing key) has been a nack for
// amqpx.NackedSessionLimit.
var errNackStreak = errors.New("every publish nacked to one destination, none confirmed")

// New checks cfg and prepares a relay; it connects to nothing.
func New(cfg Config) (*Relay, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	table, err := outbox.New(cfg.Table)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	r := &Relay{cfg: cfg, pool: cfg.Pool, log: cfg.Logger.With("relay", cfg.Name, "slot", cfg.Slot),
		enc: engine.Encoding{Envelope: warren.Encoder{Format: cfg.Format, Publisher: cfg.Publisher}, CloudEvents: cfg.CloudEvents}, table: table}
	r.observe = observeguard.New(r.log)
	if cfg.TracerProvider != nil {
		r.tracer = cfg.TracerProvider.Tracer("github.com/warrenmq/warren/relay/cdc")
	}
	dsn := cfg.DatabaseURL
	if dsn == "" {
		dsn = cfg.Pool.Config().ConnString()
	}
	// Parsed as a pool's config so that pgxpool's and pgx's own keys
	// (pool_max_conns, default_query_exec_mode, …) are taken out: sent as
	// startup parameters, the server would refuse the connection.
	parsed, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("%w: DatabaseURL: %s", ErrInvalidConfig, redact.Error(err))
	}
	repl := parsed.ConnConfig.Config.Copy()
	// The stream's timestamps arrive as text in the session's DateStyle,
	// which decodeTuple reads as ISO.
	repl.RuntimeParams["replication"] = "database"
	repl.RuntimeParams["DateStyle"] = "ISO, MDY"
	repl.RuntimeParams["application_name"] = cfg.Name
	r.repl = repl
	if r.pool == nil {
		if r.poolConfig, err = pgxpool.ParseConfig(dsn); err != nil {
			return nil, fmt.Errorf("%w: DatabaseURL: %s", ErrInvalidConfig, redact.Error(err))
		}
		r.poolConfig.ConnConfig.RuntimeParams["application_name"] = cfg.Name
		r.poolConfig.MaxConns = 4
	}
	return r, nil
}

// Published is how many events this relay has had confirmed by the broker.
func (r *Relay) Published() int64 { return r.published.Load() }

// Dead is how many events this relay has made dead.
func (r *Relay) Dead() int64 { return r.dead.Load() }

// Streaming reports whether the relay holds the slot now.
func (r *Relay) Streaming() bool { return r.streaming.Load() }

// Table is the outbox table the relay streams.
func (r *Relay) Table() string { return r.cfg.Table }

// Slot is the replication slot of the relay's group.
func (r *Relay) Slot() string { return r.cfg.Slot }

// Run streams until ctx ends, then returns nil. A lost connection, to
// Postgres or to the broker, ends a session; the next one resumes from
// the last flushed position, so what was published and not yet flushed is
// published again. While another relay streams the slot, Run stands by
// and tries again every StandbyRetry. It returns an error only for what
// waiting cannot mend: a server whose wal_level is not logical, a missing
// outbox table ([ErrNoTable]), an outbox or state table that is not
// logged ([ErrNotLogged]), a publication that does not publish it
// ([ErrNotPublished]), another relay group on the table
// ([ErrOtherGroup]), or a broker that refused the credentials or
// the vhost of AMQPURL before it ever let the relay in (refused later, the
// relay keeps trying and logs an error).
func (r *Relay) Run(ctx context.Context) error {
	r.health.setRole(RoleStarting)
	defer r.health.setRole(RoleStopped)
	if r.poolConfig != nil {
		pool, err := pgxpool.NewWithConfig(ctx, r.poolConfig)
		if err != nil {
			return err
		}
		defer pool.Close()
		r.pool = pool
	}
	// Which broker and database, said once: with several environments a
	// relay that does not say where it publishes misleads.
	r.log.Info("cdc relay started", "amqp_url", amqpx.RedactURLs(r.cfg.AMQPURL), "database_url", redact.URL(r.cfg.DatabaseURL),
		"table", r.cfg.Table)
	if r.cfg.Observer != nil && r.cfg.StatsInterval > 0 {
		// Standing by or streaming, every relay of the group reports, as
		// every polling relay of a table does.
		statsCtx, stopStats := context.WithCancel(ctx)
		var stats sync.WaitGroup
		stats.Go(func() {
			engine.ReportStats(statsCtx, r.table, r.pool, r.cfg.StatsInterval, func(s outbox.Stats) {
				r.observe.Call("OutboxStats", func() { r.cfg.Observer.OutboxStats(r.cfg.Table, s) })
			}, r.log)
		})
		defer stats.Wait()
		defer stopStats()
	}
	standingBy := false
	wait := r.cfg.StandbyRetry
	for {
		began := time.Now()
		err := r.session(ctx)
		if ctx.Err() == nil {
			r.health.sessionEnded(err)
		}
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, ErrWALLevel), errors.Is(err, ErrNoTable), errors.Is(err, ErrNotPublished), errors.Is(err, ErrOtherGroup), errors.Is(err, ErrNotLogged),
			errors.Is(err, amqpx.ErrRefused) && !r.brokerLetIn:
			return err
		case errors.Is(err, amqpx.ErrRefused):
			standingBy = false
			r.log.Error("the broker refuses the relay it let in before; will start again", "error", err, "retry_in", wait)
		case isSlotBusy(err):
			if !standingBy {
				r.log.Info("another relay streams the slot; standing by", "error", err)
				standingBy = true
			}
			wait = r.cfg.StandbyRetry
		default:
			standingBy = false
			if time.Since(began) > time.Minute {
				wait = r.cfg.StandbyRetry
			}
			r.log.Warn("stream ended; will start again", "error", err, "retry_in", wait)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		if !isSlotBusy(err) {
			wait = min(2*wait, maxSessionRetry)
		}
	}
}

// blockChanged reports the broker's connection.blocked and unblocked.
func (r *Relay) blockChanged(blocked bool, reason string) {
	switch {
	case blocked:
		r.log.Warn("the broker blocked the connection (an alarm); the stream waits for the confirms, up to PublishTimeout", "reason", reason)
	case reason == "":
		r.log.Info("the broker unblocked the connection")
	}
	r.observe.ObserveBlocked(r.cfg.Observer, r.cfg.Table, blocked, reason)
}

func isSlotBusy(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == sqlObjectInUse
}

// session streams the slot until something fails or ctx ends. Four
// goroutines pass the events along, each in stream order: read decodes
// the stream into a queue, publishLoop publishes it a batch at a time, up
// to BatchesInFlight batches ahead of their confirms, confirmLoop awaits
// the confirms, and settleLoop trims the confirmed rows and only then
// moves the position Postgres is told.
func (r *Relay) session(ctx context.Context) error {
	if !r.endedOnNacks {
		r.nackedSince.clear()
	}
	r.endedOnNacks = false
	st, err := r.setup(ctx)
	if err != nil {
		return err
	}
	conn, err := pgconn.ConnectConfig(ctx, r.repl)
	if err != nil {
		return fmt.Errorf("replication connection: %s", redact.Error(err))
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		conn.Close(cctx)
	}()
	start, err := r.confirmedFlush(ctx)
	if err != nil {
		return err
	}
	err = pglogrepl.StartReplication(ctx, conn, r.cfg.Slot, start, pglogrepl.StartReplicationOptions{
		PluginArgs: []string{"proto_version '1'", "publication_names '" + r.cfg.Publication + "'"},
	})
	if err != nil {
		return fmt.Errorf("start streaming slot %s: %w", r.cfg.Slot, err)
	}
	r.flushed.Store(uint64(start))
	r.nacks.Reset()
	amqpConn, err := amqpx.Dial(ctx, r.cfg.AMQPURL, amqpx.DialOptions{Name: r.cfg.Name})
	if err != nil {
		return err
	}
	r.brokerLetIn = true
	// The broker's connection.blocked, seen as the polling relay sees it
	// (ADR 017): in Health, the log and the Observer. The loop ends once
	// the connection is closed (deferred below, so it runs first).
	var blockWatch sync.WaitGroup
	defer blockWatch.Wait()
	blockWatch.Go(amqpx.WatchBlocked(amqpConn, &r.health.block, r.blockChanged))
	// A broker that stops answering (an alarm) must not hold a stop:
	// the close and the declare are bounded, closing the connection
	// under them when they overrun.
	defer amqpx.CloseConnection(amqpConn, amqpx.CloseTimeout)
	dctx, dcancel := context.WithTimeout(ctx, amqpx.SetupTimeout)
	err = amqpx.Bound(dctx, amqpConn, func() error { return amqpx.DeclareFanout(amqpConn, r.cfg.Exchange) })
	dcancel()
	if err != nil {
		return err
	}
	// Room for every batch in flight and the retries of one: confirm
	// publishes a refused event's retry, and waits for it, before the
	// batches sent after its batch are waited for (Send's rule is to wait
	// in the order sent); their slots stay taken meanwhile, and the extra
	// batch of slots is what lets the retry be sent.
	pub, err := amqpx.NewPublisher(ctx, amqpConn, (r.cfg.BatchesInFlight+1)*r.cfg.BatchSize)
	if err != nil {
		return err
	}
	defer pub.Close()
	r.streaming.Store(true)
	defer r.streaming.Store(false)
	r.log.Info("streaming", "from", start, "backfill", st.backfill, "settled", st.settled)

	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	q := newQueue(4 * r.cfg.BatchSize)
	p := pipeline{sent: make(chan *inFlight, r.cfg.BatchesInFlight), room: make(chan struct{}, r.cfg.BatchesInFlight)}
	settles := make(chan settlement, settleQueue)
	var wg sync.WaitGroup
	wg.Go(func() { cancel(r.read(sctx, conn, q)) })
	wg.Go(func() {
		defer close(p.sent)
		cancel(r.publishLoop(sctx, pub, q, p, st))
	})
	wg.Go(func() {
		defer close(settles)
		r.confirmLoop(sctx, pub, p, settles, cancel)
	})
	wg.Go(func() { r.settleLoop(sctx, settles, cancel) })
	select {
	case <-sctx.Done():
	case e := <-pub.NotifyClose():
		cancel(fmt.Errorf("broker closed the publish channel: %v", e))
	}
	wg.Wait()
	r.endedOnNacks = errors.Is(context.Cause(sctx), errNackStreak)
	// The batch in flight when the session ended was settled; telling
	// Postgres now spares the next relay publishing it again. Best effort:
	// a position not reported is only a duplicate later.
	conn.Conn().SetWriteDeadline(time.Now().Add(2 * time.Second))
	pglogrepl.SendStandbyStatusUpdate(ctx, conn, pglogrepl.StandbyStatusUpdate{WALWritePosition: pglogrepl.LSN(r.flushed.Load())})
	return context.Cause(sctx)
}

// confirmedFlush reads the slot's flushed position: where the stream
// resumes.
func (r *Relay) confirmedFlush(ctx context.Context) (pglogrepl.LSN, error) {
	var lsn *string
	err := r.pool.QueryRow(ctx, `SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1`, r.cfg.Slot).Scan(&lsn)
	if err != nil || lsn == nil {
		return 0, fmt.Errorf("read the position of slot %s: %v", r.cfg.Slot, err)
	}
	return pglogrepl.ParseLSN(*lsn)
}

// maxSessionRetry caps the doubling wait between failed sessions: a
// broker back from an outage is found within it, and the rows waiting
// meanwhile are the lag.
const maxSessionRetry = 5 * time.Second
