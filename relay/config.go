package relay

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/cloudevents"
	"github.com/warrenmq/warren/internal/amqpx"
	"github.com/warrenmq/warren/internal/redact"
	"github.com/warrenmq/warren/outbox"
	"github.com/warrenmq/warren/relay/internal/engine"
)

// Config configures a [Relay]. The zero value of every field means its
// documented default, except that one of Pool and DatabaseURL is required.
type Config struct {
	// Pool is the Postgres pool the relay claims and settles rows on. The
	// relay does not close it. When nil, the relay opens (and closes) its
	// own pool from DatabaseURL.
	Pool *pgxpool.Pool

	// DatabaseURL is a pgx connection string ("postgres://…" or
	// "key=value …"), used when Pool is nil. Logged only with the password
	// redacted.
	DatabaseURL string

	// AMQPURL is the broker, or several nodes of one cluster separated by
	// commas: each connection goes to a node picked at random and, when
	// it is lost, to the next (see consumer.Config.URL). Default
	// amqp://guest:guest@127.0.0.1:5672/. Logged only with the passwords
	// redacted.
	AMQPURL string

	// Exchange is the durable fanout exchange events are published to; the
	// relay declares it (declaring an existing one with the same type is a
	// no-op). Default "warren.events", the consumer's default.
	Exchange string

	// Table is the outbox table: a lower-case SQL identifier of at most 48
	// bytes, unqualified, so the connection's search_path picks its schema.
	// Default "warren_outbox", or "outbox" (Plane's) with SchemaPlane.
	Table string

	// Schema is the table's layout: outbox.SchemaWarren (the default), or
	// outbox.SchemaPlane to drain Plane's own outbox table where it is,
	// without a migration: claimed_at is the claim and its lease,
	// processed_at is set on a confirmed row, no row is deleted
	// (KeepDelivered is implied; Plane's cleaner trims processed rows),
	// and OrderByEntity is not supported. Plane's consumers want Format
	// warren.FormatPlane as well. See the package documentation.
	Schema outbox.Schema

	// Name identifies this relay: it is written to claimed rows
	// (claimed_by), and it is the AMQP connection name and the Postgres
	// application_name of the connections the relay opens. Default
	// "warren-relay@<host>:<pid>".
	Name string

	// Format is the envelope format of the messages: warren.FormatWarren
	// (the default) or warren.FormatPlane, for Plane's consumers.
	Format warren.Format

	// PlaneProperties publishes with exactly the AMQP properties Plane's
	// publisher sets, for operators who compare messages byte for byte
	// or run consumers that read properties: persistent delivery,
	// content type application/json, content encoding utf-8 and the time
	// of publishing in seconds; no message_id, no type and no headers.
	// What that costs: no trace context reaches the consumers (each
	// consumer's span starts a new trace), and a partitioned consumer
	// (consumer.Config.Partitions), which hashes on the entity id header,
	// cannot spread the events over its partitions. warren's consumers
	// read everything else from the body. Default false: warren's
	// properties, which Plane's consumers ignore.
	PlaneProperties bool

	// CloudEvents, when set, publishes each event as a CloudEvent (package
	// cloudevents: the AMQP binding's binary or structured mode) in place
	// of Format's envelope; its Source, naming the producing service, is
	// required. Consumers read both (deploy them first); Plane's do not.
	// It cannot go with FormatPlane or PlaneProperties.
	CloudEvents *cloudevents.Encoder

	// Publisher fills the publisher fields of warren.FormatPlane. Defaults:
	// Name the relay's Name, Instance the host name, Version
	// warren.PlaneEnvelopeVersion, Source DefaultSource. Unused in
	// warren.FormatWarren.
	Publisher warren.PublisherInfo

	// BatchSize is how many rows one claim takes. All rows of a batch are
	// published concurrently. Default 500: the relay waits on round trips
	// (claim, confirms, settle), not on its CPU, so fewer and larger
	// batches move more rows; devtools/bench/RESULTS.md measures 100 against 500. A
	// smaller batch bounds how many rows one lapsed lease publishes twice.
	BatchSize int

	// Workers is how many claim–publish–settle loops run at once, so that
	// one batch is claimed while another waits for its confirms. Default 2.
	Workers int

	// Lease is how long a claimed row stays invisible to other relays. A
	// relay that dies holding rows delays them by at most this long. It
	// must be longer than PublishTimeout. Default 30s.
	Lease time.Duration

	// PublishTimeout bounds the wait for the broker's confirm of one
	// message; a timeout is a failed attempt. Default 10s.
	PublishTimeout time.Duration

	// MaxAttempts is how many claims a row gets: a failure on the last one,
	// or a lease that lapses after it, makes the row dead. Default 20,
	// which with the default retry delays keeps a row that the broker
	// refuses (no queue bound, nacks) for one to two hours. A broker that is
	// unreachable spends no attempts: the relay claims nothing without it.
	MaxAttempts int

	// RetryMin and RetryMax bound the delay before a failed row is tried
	// again: it doubles from RetryMin with each attempt up to RetryMax, and
	// is jittered down by up to half so that rows failed together do not
	// retry together. Defaults 1s and 10m.
	RetryMin, RetryMax time.Duration

	// PollMin and PollMax bound the adaptive poll: after an empty claim
	// the wait doubles from PollMin up to PollMax; a claim that finds rows,
	// or a notification, brings it back to PollMin; a full batch is
	// followed by the next claim at once. Defaults 2ms and 2s. Producers
	// send no NOTIFY while rows are due (outbox.NotifyWhenIdle, their
	// default), so a busy relay hears of their rows from the poll after
	// each claim: PollMin is that delay. An idle relay's poll backs off to
	// PollMax in ten empty claims.
	PollMin, PollMax time.Duration

	// MaxInFlight caps unconfirmed publishes on the relay's channel.
	// Default BatchSize × Workers.
	MaxInFlight int

	// MaxMessageBytes is the largest message body the relay publishes; a
	// row whose event encodes larger is dead at once (retrying cannot
	// shrink it) instead of making the broker close the channel. Default
	// 1 MiB, the consumer's default body limit.
	MaxMessageBytes int

	// KeepDelivered keeps published rows, marked delivered, instead of
	// deleting them; Purge trims them later. Default false.
	KeepDelivered bool

	// OrderByEntity publishes the events of one entity (entity_type,
	// entity_id) in outbox order: only the oldest pending row of an entity
	// is claimable. The price is head-of-line blocking per entity — a row
	// that keeps failing holds back every later event of its entity until
	// it is delivered or dead. Rows with an empty entity_id are not
	// ordered. Default false.
	OrderByEntity bool

	// DisableListen turns LISTEN/NOTIFY off, leaving only the poll; needed
	// behind a connection pooler in transaction mode. Default false.
	DisableListen bool

	// ReconnectMaxDelay caps the wait between reconnect attempts to the
	// broker and to Postgres, which grows exponentially with jitter from
	// 100ms. Default 15s.
	ReconnectMaxDelay time.Duration

	// Logger receives the relay's log lines, redacted (internal/redact):
	// credentials in them are masked. Default slog.Default().
	Logger *slog.Logger

	// Observer, when set, is told of every wake-up, publish verdict and
	// dead row, and gets the table's Stats every StatsInterval: the hook
	// for metrics (package warrenprom/relayprom). Default nil: none of
	// that work is done.
	Observer Observer

	// HoldBack, when set, stops the claims while a consumer's queue is
	// too deep, so that a slow or stopped consumer's backlog waits in the
	// outbox rather than in the broker's memory; see [HoldBack]. Default
	// nil: the relay publishes whatever the queues hold.
	HoldBack *HoldBack

	// StatsInterval is how often the Observer gets the table's Stats,
	// the first time when the relay starts. Default 15s; unused without
	// an Observer. A negative StatsInterval reports no Stats: an
	// Observer of the publishes alone, without the reading of every
	// pending row that Stats costs (outbox.Table.Stats).
	StatsInterval time.Duration

	// TracerProvider, when set, makes the relay record a producer span for
	// every publish, a child of the trace context Publish stored with the
	// row. Default nil: no spans, and a stored trace context is passed to
	// the message headers unchanged, so consumers still join the
	// producer's trace.
	TracerProvider trace.TracerProvider
}

// Defaults applied by [New].
const (
	DefaultExchange          = "warren.events"
	DefaultBatchSize         = 500
	DefaultWorkers           = 2
	DefaultLease             = 30 * time.Second
	DefaultPublishTimeout    = 10 * time.Second
	DefaultMaxAttempts       = 20
	DefaultRetryMin          = time.Second
	DefaultRetryMax          = 10 * time.Minute
	DefaultPollMin           = 2 * time.Millisecond
	DefaultPollMax           = 2 * time.Second
	DefaultMaxMessageBytes   = 1 << 20
	DefaultReconnectMaxDelay = 15 * time.Second
	DefaultSource            = "warren-relay"
)

// MaxBatchSize bounds BatchSize: a claim returns the whole batch in one
// result.
const MaxBatchSize = 10000

// ErrInvalidConfig is wrapped by every error [New] returns for bad
// configuration.
var ErrInvalidConfig = errors.New("invalid relay config")

func (c Config) withDefaults() Config {
	c.AMQPURL = cmp.Or(c.AMQPURL, amqpx.DefaultURL)
	c.Exchange = cmp.Or(c.Exchange, DefaultExchange)
	c.Schema = cmp.Or(c.Schema, outbox.SchemaWarren)
	if c.Schema == outbox.SchemaPlane {
		c.Table = cmp.Or(c.Table, outbox.DefaultPlaneTable)
	}
	c.Table = cmp.Or(c.Table, outbox.DefaultTable)
	c.Name = cmp.Or(c.Name, defaultName())
	c.Format = cmp.Or(c.Format, warren.FormatWarren)
	c.Publisher = engine.PublisherDefaults(c.Publisher, c.Name, DefaultSource)
	c.BatchSize = cmp.Or(c.BatchSize, DefaultBatchSize)
	c.Workers = cmp.Or(c.Workers, DefaultWorkers)
	c.Lease = cmp.Or(c.Lease, DefaultLease)
	c.PublishTimeout = cmp.Or(c.PublishTimeout, DefaultPublishTimeout)
	c.MaxAttempts = cmp.Or(c.MaxAttempts, DefaultMaxAttempts)
	c.RetryMin = cmp.Or(c.RetryMin, DefaultRetryMin)
	c.RetryMax = cmp.Or(c.RetryMax, DefaultRetryMax)
	c.PollMin = cmp.Or(c.PollMin, DefaultPollMin)
	c.PollMax = cmp.Or(c.PollMax, DefaultPollMax)
	c.MaxInFlight = cmp.Or(c.MaxInFlight, c.BatchSize*c.Workers)
	c.MaxMessageBytes = cmp.Or(c.MaxMessageBytes, DefaultMaxMessageBytes)
	c.ReconnectMaxDelay = cmp.Or(c.ReconnectMaxDelay, DefaultReconnectMaxDelay)
	c.StatsInterval = cmp.Or(c.StatsInterval, DefaultStatsInterval)
	if c.HoldBack != nil {
		h := *c.HoldBack // the caller's stays as given
		h.Queues = slices.Clone(h.Queues)
		h.LowWater = cmp.Or(h.LowWater, h.HighWater/2)
		h.Interval = cmp.Or(h.Interval, DefaultHoldBackInterval)
		c.HoldBack = &h
	}
	// Every line the relay logs goes through the one redaction step.
	c.Logger = redact.Logger(c.Logger)
	return c
}

func defaultName() string {
	return fmt.Sprintf("warren-relay@%s:%d", amqpx.Hostname(), os.Getpid())
}

func (c Config) validate() error {
	var problems []string
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	if _, err := outbox.ParseSchema(string(c.Schema)); err != nil {
		add("Schema: %v", err)
	}
	if c.Schema == outbox.SchemaPlane && c.OrderByEntity {
		add("OrderByEntity is not supported on a Plane outbox table (Schema %q)", c.Schema)
	}
	problems = append(problems, engine.Shared{
		HasDatabase: c.Pool != nil || c.DatabaseURL != "", Table: c.Table, AMQPURL: c.AMQPURL,
		Exchange: c.Exchange, Name: c.Name, Format: c.Format, CloudEvents: c.CloudEvents, PlaneProperties: c.PlaneProperties,
		MaxMessageBytes: c.MaxMessageBytes, RetryMin: c.RetryMin, RetryMax: c.RetryMax,
		StatsInterval: c.StatsInterval,
		Durations: map[string]time.Duration{"Lease": c.Lease, "PublishTimeout": c.PublishTimeout,
			"PollMin": c.PollMin, "PollMax": c.PollMax, "ReconnectMaxDelay": c.ReconnectMaxDelay},
	}.Problems()...)
	for name, v := range map[string]int{"BatchSize": c.BatchSize, "Workers": c.Workers, "MaxAttempts": c.MaxAttempts, "MaxInFlight": c.MaxInFlight} {
		if v < 1 {
			add("%s must be positive, got %d", name, v)
		}
	}
	if c.BatchSize > MaxBatchSize {
		add("BatchSize must be at most %d, got %d", MaxBatchSize, c.BatchSize)
	}
	if c.Lease <= c.PublishTimeout {
		add("Lease (%v) must be longer than PublishTimeout (%v), or rows would be reclaimed while their publish is still waiting", c.Lease, c.PublishTimeout)
	}
	if c.PollMax < c.PollMin {
		add("PollMax (%v) must not be below PollMin (%v)", c.PollMax, c.PollMin)
	}
	if h := c.HoldBack; h != nil {
		switch {
		case len(h.Queues) == 0:
			add("HoldBack: Queues is empty: no queue to hold the relay back")
		case slices.ContainsFunc(h.Queues, func(q string) bool { return q == "" || len(q) > 255 }):
			// A longer name is not refused by the broker but by the
			// client, which closes the whole connection over it.
			add("HoldBack: a queue name is empty or longer than AMQP's 255 bytes")
		}
		if h.HighWater < 1 || h.LowWater < 0 || h.LowWater >= h.HighWater {
			add("HoldBack: want a HighWater of at least 1 and a LowWater below it (0: HighWater/2), got HighWater %d and LowWater %d", h.HighWater, h.LowWater)
		}
		if h.Interval < time.Millisecond {
			add("HoldBack: Interval must be at least 1ms, got %v", h.Interval)
		}
	}
	if len(problems) > 0 {
		slices.Sort(problems)
		return fmt.Errorf("%w: %s", ErrInvalidConfig, strings.Join(problems, "; "))
	}
	return nil
}
