package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/cloudevents"
	"github.com/warrenmq/warren/internal/amqpx"
	"github.com/warrenmq/warren/internal/httpserver"
	"github.com/warrenmq/warren/internal/redact"
	"github.com/warrenmq/warren/outbox"
	"github.com/warrenmq/warren/relay"
	"github.com/warrenmq/warren/relay/cdc"
	"github.com/warrenmq/warren/warrenprom/relayprom"
)

var relayCommand = command{name: "relay", summary: "run the outbox relay: 'warren relay run'", run: runRelay}

// relayRunOptions are the flags of 'warren relay run' beyond the database
// ones.
type relayRunOptions struct {
	db                                   outboxDBFlags
	amqpURL, exchange, name              string
	batchSize, workers, maxAttempts      int
	lease, publishTimeout                ageFlag
	pollMin, pollMax, retryMin, retryMax ageFlag
	keepDelivered, orderByEntity         bool
	noListen, migrate                    bool
	healthAddr                           string
	format                               string
	cloudEvents, cloudEventsSource       string
	planeProperties                      bool
	publisher                            warren.PublisherInfo
	mode, slot                           string
	dropSlot                             bool
	nackTimeout                          ageFlag
	holdBackQueues                       listFlag
	highWater, lowWater                  int
}

func (o *relayRunOptions) register(fs *flagSet) {
	o.db.register(fs)
	fs.String(&o.amqpURL, "amqp-url", "URL", "the broker, or a cluster's nodes separated by commas; default $AMQP_URL, else "+redact.URL(amqpx.DefaultURL), "")
	fs.String(&o.exchange, "exchange", "NAME", "the durable fanout exchange to publish to (declared if missing); default $WARREN_EXCHANGE, else "+relay.DefaultExchange, "")
	fs.String(&o.name, "name", "NAME", "this relay's name in claimed rows, broker connections and pg_stat_activity; default warren-relay@HOST:PID (with --mode cdc, warren-cdc-relay@HOST:PID)", "")
	fs.String(&o.format, "format", "warren|plane", "the envelope format of published messages: warren's own, or Plane's for Plane's consumers; default $WARREN_FORMAT, else warren", "")
	fs.String(&o.cloudEvents, "cloudevents", "binary|structured", "publish each event as a CloudEvent (the AMQP binding's binary or structured content mode) in place of the envelope; warren's consumers read both, Plane's neither (docs/cloudevents.md); default $WARREN_CLOUDEVENTS, else off", "")
	fs.String(&o.cloudEventsSource, "cloudevents-source", "URI", "with --cloudevents, every event's source attribute: a URI-reference naming the producing service, the same on every relay of the table (e.g. /orders); default $WARREN_CLOUDEVENTS_SOURCE", "")
	fs.Bool(&o.planeProperties, "plane-properties", "publish with exactly the AMQP properties Plane's publisher sets (persistent, application/json, utf-8, a timestamp) and no others: no message_id, type, or headers, so no trace context and no entity id for partitioned consumers")
	fs.String(&o.publisher.Name, "publisher", "NAME", "the Plane envelope's publisher; default $WARREN_PUBLISHER, else the relay's name", "")
	fs.String(&o.publisher.Instance, "publisher-instance", "NAME", "the Plane envelope's publisher_instance; default $WARREN_PUBLISHER_INSTANCE, else the host name", "")
	fs.String(&o.publisher.Version, "envelope-version", "V", "the Plane envelope's version for events without one; default $WARREN_ENVELOPE_VERSION, else "+warren.PlaneEnvelopeVersion, "")
	fs.String(&o.publisher.Source, "source", "NAME", "the Plane envelope's source; default $WARREN_SOURCE, else "+relay.DefaultSource, "")
	fs.Int(&o.batchSize, "batch-size", "N", fmt.Sprintf("rows per claim, published concurrently; with --mode cdc, events per batch of the stream (default %d)", cdc.DefaultBatchSize), relay.DefaultBatchSize)
	fs.Int(&o.workers, "workers", "N", "claim-publish-settle loops running at once", relay.DefaultWorkers)
	fs.Var(&o.lease, "lease", "DURATION", fmt.Sprintf("how long a claim hides a row from other relays (default %v)", relay.DefaultLease))
	fs.Var(&o.publishTimeout, "publish-timeout", "DURATION", fmt.Sprintf("wait for the broker's confirm before a publish counts as failed; with --mode cdc, before the session ends and starts again (default %v)", relay.DefaultPublishTimeout))
	fs.Int(&o.maxAttempts, "max-attempts", "N", fmt.Sprintf("claims per row before it is dead; with --mode cdc, times an event the broker returns as unroutable is published before it is dead (default %d)", cdc.DefaultMaxAttempts), relay.DefaultMaxAttempts)
	fs.Var(&o.retryMin, "retry-min", "DURATION", fmt.Sprintf("delay after a row's first failure, doubling per attempt (default %v; with --mode cdc, the stream's wait before it publishes refused events again, default %v)", relay.DefaultRetryMin, cdc.DefaultRetryMin))
	fs.Var(&o.retryMax, "retry-max", "DURATION", fmt.Sprintf("longest delay between attempts (default %v; with --mode cdc %v)", relay.DefaultRetryMax, cdc.DefaultRetryMax))
	fs.Var(&o.pollMin, "poll-min", "DURATION", fmt.Sprintf("shortest wait between claims when busy (default %v)", relay.DefaultPollMin))
	fs.Var(&o.pollMax, "poll-max", "DURATION", fmt.Sprintf("longest wait between claims when idle (default %v)", relay.DefaultPollMax))
	fs.Bool(&o.keepDelivered, "keep-delivered", "mark published rows delivered instead of deleting them ('warren outbox purge' trims them)")
	fs.Bool(&o.orderByEntity, "order-by-entity", "publish each entity's events in outbox order (a failing row holds back its entity)")
	fs.Bool(&o.noListen, "no-listen", "do not LISTEN for commits; poll only (behind a transaction-mode pooler)")
	fs.Bool(&o.migrate, "migrate", "create or update the outbox table before starting")
	fs.String(&o.mode, "mode", "poll|cdc", "poll: claim rows from the table (the default); cdc: stream the table's inserts from the write-ahead log through a logical replication slot (needs wal_level = logical; see docs/cdc.md)", "poll")
	fs.String(&o.slot, "slot", "NAME", "with --mode cdc, the replication slot of this relay group, one streaming and the others standing by; default the table's name with _cdc appended", "")
	fs.Bool(&o.dropSlot, "drop-slot", "with --mode cdc, retire the group: drop its slot and publication (while no relay streams it) and exit; pending rows stay in the table")
	fs.Var(&o.nackTimeout, "nack-timeout", "DURATION", fmt.Sprintf("with --mode cdc, how long an event may go on being nacked by the broker before it is dead; the stream waits meanwhile (default %v)", cdc.DefaultNackTimeout))
	fs.Var(&o.holdBackQueues, "hold-back-queue", "QUEUES", "consumers' queues whose depth holds the relay back: at --high-water ready messages in one of them it claims nothing, and the backlog waits in the outbox until every one is at --low-water (comma-separated or repeated; default none)")
	fs.Int(&o.highWater, "high-water", "N", "with --hold-back-queue, the ready messages in one queue that stop the claims", 10000)
	fs.Int(&o.lowWater, "low-water", "N", "with --hold-back-queue, the ready messages in every queue below which claims resume (default half --high-water)", 0)
	fs.String(&o.healthAddr, "health-addr", "ADDR", "serve /healthz, /readyz and Prometheus /metrics on this address (e.g. 127.0.0.1:9464, or :9464 for every interface); default off", "")
}

func (o *relayRunOptions) config(env *cliEnv) (relay.Config, error) {
	if err := o.db.resolve(env); err != nil {
		return relay.Config{}, err
	}
	o.db.lease = time.Duration(o.lease)
	var ce *cloudevents.Encoder
	source := cmp.Or(o.cloudEventsSource, env.getenv("WARREN_CLOUDEVENTS_SOURCE"))
	if mode := cmp.Or(o.cloudEvents, env.getenv("WARREN_CLOUDEVENTS")); mode != "" {
		m, err := cloudevents.ParseMode(mode)
		if err != nil {
			return relay.Config{}, usagef("--cloudevents: %v", err)
		}
		ce = &cloudevents.Encoder{Mode: m, Source: source}
	} else if o.cloudEventsSource != "" {
		return relay.Config{}, usagef("--cloudevents-source needs --cloudevents")
	}
	var holdBack *relay.HoldBack
	if len(o.holdBackQueues) > 0 {
		holdBack = &relay.HoldBack{Queues: o.holdBackQueues, HighWater: o.highWater, LowWater: o.lowWater}
	}
	return relay.Config{
		HoldBack:        holdBack,
		DatabaseURL:     o.db.databaseURL,
		Table:           o.db.table,
		Schema:          outbox.Schema(o.db.schema),
		AMQPURL:         cmp.Or(o.amqpURL, env.getenv("AMQP_URL"), amqpx.DefaultURL),
		Exchange:        cmp.Or(o.exchange, env.getenv("WARREN_EXCHANGE"), relay.DefaultExchange),
		Name:            o.name,
		Format:          warren.Format(cmp.Or(o.format, env.getenv("WARREN_FORMAT"))),
		PlaneProperties: o.planeProperties,
		CloudEvents:     ce,
		Publisher: warren.PublisherInfo{
			Name:     cmp.Or(o.publisher.Name, env.getenv("WARREN_PUBLISHER")),
			Instance: cmp.Or(o.publisher.Instance, env.getenv("WARREN_PUBLISHER_INSTANCE")),
			Version:  cmp.Or(o.publisher.Version, env.getenv("WARREN_ENVELOPE_VERSION")),
			Source:   cmp.Or(o.publisher.Source, env.getenv("WARREN_SOURCE")),
		},
		BatchSize:      o.batchSize,
		Workers:        o.workers,
		Lease:          time.Duration(o.lease),
		PublishTimeout: time.Duration(o.publishTimeout),
		MaxAttempts:    o.maxAttempts,
		RetryMin:       time.Duration(o.retryMin),
		RetryMax:       time.Duration(o.retryMax),
		PollMin:        time.Duration(o.pollMin),
		PollMax:        time.Duration(o.pollMax),
		KeepDelivered:  o.keepDelivered,
		OrderByEntity:  o.orderByEntity,
		DisableListen:  o.noListen,
		Logger:         slog.New(slog.NewTextHandler(env.stderr, nil)),
	}, nil
}

// relayVerbs are `warren relay`'s subcommands: run, for now.
var relayVerbs = &subcommands[relayRunOptions, *relayRun]{
	command: "relay", common: func(fs *flagSet, o *relayRunOptions) { o.register(fs) },
	verbs: []subcommand[relayRunOptions, *relayRun]{{
		name: "run", summary: "move events from the outbox table to the broker until stopped",
		about: "Move events from the outbox table to the broker until SIGINT or SIGTERM: claim due rows (FOR UPDATE SKIP LOCKED, with a lease), publish them with publisher confirms and mandatory routing, and delete each row (or mark it delivered) only after the broker confirmed it. Run as many relays on one table as you like. On a stop, publishes in flight finish and unpublished claims are released. Losing the broker or the database is waited out with backoff; rows wait. With --health-addr, /healthz answers 200 while the relay runs and no worker is stuck, /readyz 200 while it can claim and publish, and /metrics serves the relay and outbox metrics (docs/alerts.md); with --mode cdc, /healthz answers 200 while the relay runs and its stream's reader is not stuck, /readyz 200 while it streams the slot (its connection not blocked by the broker) or stands by for it (the body says which), and /metrics serves the same relay and outbox metrics, the relay's counts and the slot's lag.\n\nPasswords are never printed. Exit status: 0 after a graceful stop; 1 the relay could not run (e.g. the table is missing: run 'warren outbox migrate'); 2 the command line was wrong.",
		examples: []string{
			"warren relay run --migrate",
			"DATABASE_URL=postgres://app@db/app AMQP_URL=amqp://app@mq/ warren relay run --exchange app.events",
			"warren relay run --table orders_outbox --keep-delivered --order-by-entity",
			"warren relay run --format plane --exchange plane.event_stream     (Plane's consumers read what it publishes)",
			"warren relay run --schema plane --format plane --exchange plane.event_stream     (drain Plane's own outbox table in place, for Plane's consumers)",
			"warren relay run --health-addr 127.0.0.1:9464     (probes and Prometheus scrape it)",
		},
		run: runRelayRun,
	}},
}

// relayRun is one run of 'warren relay run', with flags parsed.
type relayRun struct {
	env  *cliEnv
	opts *relayRunOptions
	fs   *flagSet // which flags were given: the two modes' defaults differ
}

func runRelay(ctx context.Context, env *cliEnv, args []string) error {
	p, err := relayVerbs.parse(env, args)
	if err != nil {
		return err
	}
	if len(p.args) > 0 {
		return usagef("%s: unexpected argument %q", p.verb.name, p.args[0])
	}
	return p.verb.run(ctx, &relayRun{env: env, opts: p.opts, fs: p.fs})
}

func runRelayRun(ctx context.Context, c *relayRun) error {
	o, env := c.opts, c.env
	switch o.mode {
	case "cdc":
		return runCDCRelay(ctx, c)
	case "poll", "":
	default:
		return usagef("--mode %q: want poll or cdc", o.mode)
	}
	if c.fs.isSet("slot") || o.dropSlot || c.fs.isSet("nack-timeout") { // typed, even empty or zero
		return usagef("--slot, --drop-slot and --nack-timeout need --mode cdc")
	}
	if (c.fs.isSet("high-water") || c.fs.isSet("low-water")) && len(o.holdBackQueues) == 0 {
		return usagef("--high-water and --low-water need --hold-back-queue: they say when the queues it names hold the relay back")
	}
	cfg, err := o.config(env)
	if err != nil {
		return err
	}
	// A typed 0 is refused, as in CDC mode: relay.Config would take it for
	// "the default", which is not what was typed.
	for name, v := range map[string][2]int{"batch-size": {cfg.BatchSize, relay.DefaultBatchSize},
		"workers": {cfg.Workers, relay.DefaultWorkers}, "max-attempts": {cfg.MaxAttempts, relay.DefaultMaxAttempts}} {
		if _, err := c.given(name, v[0], v[1]); err != nil {
			return err
		}
	}
	reg, observer, err := o.relayMetrics()
	if err != nil {
		return err
	}
	cfg.Observer = observer
	r, err := relay.New(cfg)
	if errors.Is(err, relay.ErrInvalidConfig) {
		return usagef("%v", err)
	}
	if err != nil {
		return err
	}
	return c.serveMigrateRun(ctx, func() (func(), error) {
		return serveHealth(o.healthAddr, r.HealthHandler(), reg, cfg.Logger)
	}, r.Run)
}

// serveMigrateRun is the end of either relay's run: serve --health-addr
// (when set) with serve, migrate the table with --migrate, and run until
// SIGINT or SIGTERM. run logs its own progress and returns nil after a
// graceful stop.
func (c *relayRun) serveMigrateRun(ctx context.Context, serve func() (stop func(), err error), run func(context.Context) error) error {
	o := c.opts
	if o.healthAddr != "" {
		stop, err := serve()
		if err != nil {
			return err
		}
		defer stop()
	}
	if o.migrate {
		if err := migrateBeforeRun(ctx, &o.db, c.env.stdout); err != nil {
			return err
		}
	}
	return o.db.redact(run(ctx))
}

// relayMetrics returns, with --health-addr, the registry /metrics serves
// and the Observer that feeds it the relay metrics (relayprom), the same
// for either mode; without it, nil and a nil Observer.
func (o *relayRunOptions) relayMetrics() (*prometheus.Registry, relay.Observer, error) {
	if o.healthAddr == "" {
		return nil, nil, nil
	}
	reg := newRegistry()
	metrics, err := relayprom.NewRelayMetrics(reg, relayprom.RelayOptions{})
	if err != nil {
		return nil, nil, err
	}
	return reg, metrics, nil
}

// newRegistry is the registry --health-addr serves: the process's own
// metrics, to which the relay's are added.
func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// serveHealth serves a relay's health endpoints (health answers GET
// /healthz and /readyz) and reg's metrics on addr until stop is called.
// Listening happens now, so a taken address fails the command before the
// relay starts.
func serveHealth(addr string, health http.Handler, reg *prometheus.Registry, log *slog.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--health-addr: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/", health)
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := httpserver.New(addr, mux)
	var served sync.WaitGroup
	served.Go(func() {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			log.Error("health server failed", "error", err)
		}
	})
	log.Info("serving /healthz, /readyz and /metrics", "addr", ln.Addr().String())
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		served.Wait()
	}, nil
}

func migrateBeforeRun(ctx context.Context, db *outboxDBFlags, out io.Writer) error {
	ob, pool, err := db.open(ctx)
	if err != nil {
		return db.redact(err)
	}
	defer pool.Close()
	res, err := ob.Migrate(ctx, pool)
	if err != nil {
		return db.redact(err)
	}
	reportRecreated(out, res)
	fmt.Fprintf(out, "outbox %s at schema version %d\n", res.Table, res.To)
	return nil
}
