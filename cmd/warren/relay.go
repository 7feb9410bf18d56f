package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/warrenmq/warren/internal/amqpx"
	"github.com/warrenmq/warren/internal/redact"
	"github.com/warrenmq/warren/relay"
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
}

func (o *relayRunOptions) register(fs *flagSet) {
	o.db.register(fs)
	fs.String(&o.amqpURL, "amqp-url", "URL", "the broker; default $AMQP_URL, else "+redact.URL(amqpx.DefaultURL), "")
	fs.String(&o.exchange, "exchange", "NAME", "the durable fanout exchange to publish to (declared if missing); default $WARREN_EXCHANGE, else "+relay.DefaultExchange, "")
	fs.String(&o.name, "name", "NAME", "this relay's name in claimed rows, broker connections and pg_stat_activity; default warren-relay@HOST:PID", "")
	fs.Int(&o.batchSize, "batch-size", "N", "rows per claim, published concurrently", relay.DefaultBatchSize)
	fs.Int(&o.workers, "workers", "N", "claim-publish-settle loops running at once", relay.DefaultWorkers)
	fs.Var(&o.lease, "lease", "DURATION", fmt.Sprintf("how long a claim hides a row from other relays (default %v)", relay.DefaultLease))
	fs.Var(&o.publishTimeout, "publish-timeout", "DURATION", fmt.Sprintf("wait for the broker's confirm before a publish counts as failed (default %v)", relay.DefaultPublishTimeout))
	fs.Int(&o.maxAttempts, "max-attempts", "N", "claims per row before it is dead", relay.DefaultMaxAttempts)
	fs.Var(&o.retryMin, "retry-min", "DURATION", fmt.Sprintf("delay after a row's first failure, doubling per attempt (default %v)", relay.DefaultRetryMin))
	fs.Var(&o.retryMax, "retry-max", "DURATION", fmt.Sprintf("longest delay between attempts (default %v)", relay.DefaultRetryMax))
	fs.Var(&o.pollMin, "poll-min", "DURATION", fmt.Sprintf("shortest wait between claims when busy (default %v)", relay.DefaultPollMin))
	fs.Var(&o.pollMax, "poll-max", "DURATION", fmt.Sprintf("longest wait between claims when idle (default %v)", relay.DefaultPollMax))
	fs.Bool(&o.keepDelivered, "keep-delivered", "mark published rows delivered instead of deleting them ('warren outbox purge' trims them)")
	fs.Bool(&o.orderByEntity, "order-by-entity", "publish each entity's events in outbox order (a failing row holds back its entity)")
	fs.Bool(&o.noListen, "no-listen", "do not LISTEN for commits; poll only (behind a transaction-mode pooler)")
	fs.Bool(&o.migrate, "migrate", "create or update the outbox table before starting")
}

func (o *relayRunOptions) config(env *cliEnv) relay.Config {
	o.db.resolve(env)
	return relay.Config{
		DatabaseURL:    o.db.databaseURL,
		Table:          o.db.table,
		AMQPURL:        cmp.Or(o.amqpURL, env.getenv("AMQP_URL"), amqpx.DefaultURL),
		Exchange:       cmp.Or(o.exchange, env.getenv("WARREN_EXCHANGE"), relay.DefaultExchange),
		Name:           o.name,
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
	}
}

func runRelay(ctx context.Context, env *cliEnv, args []string) error {
	if len(args) == 0 {
		return usagef("missing subcommand (run)")
	}
	if isHelp(args[0]) {
		printRelayUsage(env.stdout, nil)
		return flag.ErrHelp
	}
	if args[0] != "run" {
		return usagef("unknown subcommand %q (want run)", args[0])
	}
	var o relayRunOptions
	fs := newFlagSet()
	o.register(fs)
	rest, err := fs.parse(args[1:])
	if errors.Is(err, flag.ErrHelp) {
		printRelayUsage(env.stdout, fs)
		return err
	}
	if err != nil {
		return usagef("run: %v", err)
	}
	if len(rest) > 0 {
		return usagef("run: unexpected argument %q", rest[0])
	}
	cfg := o.config(env)
	r, err := relay.New(cfg)
	if errors.Is(err, relay.ErrInvalidConfig) {
		return usagef("%v", err)
	}
	if err != nil {
		return err
	}
	if o.migrate {
		if err := migrateBeforeRun(ctx, &o.db, env.stdout); err != nil {
			return err
		}
	}
	// Run logs its own progress; it returns nil when SIGINT or SIGTERM
	// stops it gracefully.
	return o.db.redact(r.Run(ctx))
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
	fmt.Fprintf(out, "outbox %s at schema version %d\n", res.Table, res.To)
	return nil
}

func printRelayUsage(w io.Writer, fs *flagSet) {
	fmt.Fprint(w, `Usage: warren relay run [flags]

Move events from the outbox table to the broker until SIGINT or SIGTERM: claim
due rows (FOR UPDATE SKIP LOCKED, with a lease), publish them with publisher
confirms and mandatory routing, and delete each row (or mark it delivered) only
after the broker confirmed it. Run as many relays on one table as you like.
On a stop, publishes in flight finish and unpublished claims are released.
Losing the broker or the database is waited out with backoff; rows wait.

`)
	if fs == nil {
		fs = newFlagSet()
		new(relayRunOptions).register(fs)
	}
	fmt.Fprintln(w, "Flags:")
	fs.printDefaults(w)
	fmt.Fprint(w, `
Examples:
  warren relay run --migrate
  DATABASE_URL=postgres://app@db/app AMQP_URL=amqp://app@mq/ warren relay run --exchange app.events
  warren relay run --table orders_outbox --keep-delivered --order-by-entity

Passwords are never printed. Exit status: 0 after a graceful stop; 1 the relay
could not run (e.g. the table is missing: run 'warren outbox migrate'); 2 the
command line was wrong.
`)
}
