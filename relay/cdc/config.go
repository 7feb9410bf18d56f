package cdc

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/cloudevents"
	"github.com/warrenmq/warren/internal/amqpx"
	"github.com/warrenmq/warren/internal/redact"
	"github.com/warrenmq/warren/outbox"
	"github.com/warrenmq/warren/relay"
	"github.com/warrenmq/warren/relay/internal/engine"
)

// Config configures a [Relay]. The zero value of every field means its
// documented default, except that one of Pool and DatabaseURL is required.
type Config struct {
	// Pool runs the relay's ordinary statements: setting up the
	// publication and slot, trimming published rows, marking dead ones.
	// The relay does not close it. When nil, the relay opens its own from
	// DatabaseURL.
	Pool *pgxpool.Pool

	// DatabaseURL is a pgx connection string. The replication connection
	// is opened from it (or, when empty, from Pool's own connection
	// string) with replication=database added. Logged only redacted.
	DatabaseURL string

	// AMQPURL, Exchange and Table are the broker (one node or several),
	// the exchange and the outbox table, as for the polling relay
	// ([relay.Config]); each session connects to a node of AMQPURL.
	// Defaults amqp://guest:guest@127.0.0.1:5672/, "warren.events" and
	// "warren_outbox".
	AMQPURL, Exchange, Table string

	// Slot is the logical replication slot: one per relay group. Every
	// relay of a group names the same slot; Postgres lets one of them
	// stream it and the others stand by. Default: the table's name with
	// "_cdc" appended. Lower-case letters, digits and underscores, at most
	// 63 bytes.
	Slot string

	// Publication is the publication of the table's inserts and updates
	// the slot streams. Default: the slot's name.
	Publication string

	// Name identifies this relay in logs and as the AMQP connection name.
	Name string

	// Format and Publisher make the message body, as for the polling
	// relay (relay.Config).
	Format    warren.Format
	Publisher warren.PublisherInfo
	// CloudEvents publishes each event as a CloudEvent, as
	// relay.Config.CloudEvents does.
	CloudEvents *cloudevents.Encoder
	// PlaneProperties publishes with exactly the AMQP properties Plane's
	// publisher sets, and no others, as relay.Config.PlaneProperties does.
	PlaneProperties bool

	// BatchSize is the most events published before their confirms are
	// awaited together. A batch is whatever the stream delivered while
	// the previous batch was being confirmed, up to this size. Default 500.
	BatchSize int

	// BatchesInFlight is how many batches are published ahead of the
	// confirms of the first: the relay sends the next batch while the
	// broker confirms the ones before, in order on one channel, so that
	// neither a backlog's drain nor a single event waits for the confirm
	// round trip of the batch before it. It also bounds, with BatchSize,
	// what a relay that dies has published beyond its slot's position, to
	// be published again. Default 4; 1 waits for each batch's confirms
	// before the next is sent.
	BatchesInFlight int

	// PublishTimeout bounds the wait for a batch's confirms, from when the
	// relay starts waiting for them (after the batches ahead of it). A batch
	// that runs out of it ends the session: the stream restarts from the
	// last confirmed position. Default 10s.
	PublishTimeout time.Duration

	// MaxAttempts is how many times an event the broker returns as
	// unroutable is published before it is dead. The stream waits while
	// an event is retried, so this bounds how long one such event can hold
	// the others: at the defaults 5 publishes over about 3s (0.2+0.4+0.8+1.6s of
	// waits). The count starts again in each session, unlike NackTimeout. A nack spends no attempt (see
	// NackTimeout). Default 5.
	MaxAttempts int

	// NackTimeout is how long an event may go on being nacked, counted
	// from its first nack and across sessions, before it is dead. The
	// stream waits meanwhile. It outlasts what a nack usually is, the
	// broker's passing state (a quorum queue electing a leader, which a
	// new session's channel gets past: see the package's Failures), and
	// bounds what is not: an event larger than a queue's
	// x-max-length-bytes, under reject-publish, is nacked every time.
	// Default 30s.
	NackTimeout time.Duration

	// RetryMin and RetryMax bound the doubling wait between attempts.
	// Default 200ms and 5s.
	RetryMin, RetryMax time.Duration

	// MaxMessageBytes is the largest body the relay publishes; a larger
	// event is dead at once. Default 1 MiB, the polling relay's.
	MaxMessageBytes int

	// StandbyRetry is how often a relay whose slot another relay holds
	// tries to take it over, and how long the relay waits after a lost
	// connection before it starts again. Default 1s.
	StandbyRetry time.Duration

	// StatusInterval is how often the relay tells Postgres the position
	// up to which every event is confirmed and trimmed, which lets
	// Postgres recycle the WAL before it, and bounds what a relay that dies
	// publishes again. Default 250ms.
	StatusInterval time.Duration

	// Logger receives the relay's logs. Default slog.Default().
	Logger *slog.Logger

	// Observer, when set, is told of every publish verdict, of rows made
	// dead once that is committed, and every StatsInterval of the table's
	// Stats. It is the polling relay's [relay.Observer], so one adapter
	// (warrenprom/relayprom) serves both relays. Woken is never called:
	// the CDC relay does not poll. An Observer that implements
	// [relay.BlockObserver] is told of the broker's blocks.
	// Its methods are called from the relay's goroutines and must return
	// quickly.
	Observer relay.Observer

	// StatsInterval is how often the Observer gets the table's Stats.
	// Default relay.DefaultStatsInterval; unused without an Observer;
	// negative for none, as relay.Config.StatsInterval.
	StatsInterval time.Duration

	// TracerProvider, when set, makes the relay record a producer span
	// for each event it publishes, a child of the trace context the
	// producer stored with the row, ended at the event's verdict (its
	// retries in one session included); the message carries that span, so
	// the consumer's span is its child, as with the polling relay. Without
	// it the row's trace context is passed on unchanged.
	TracerProvider trace.TracerProvider
}

// Defaults of Config.
const (
	DefaultBatchSize       = 500
	DefaultBatchesInFlight = 4
	DefaultPublishTimeout  = 10 * time.Second
	DefaultMaxAttempts     = 5
	DefaultNackTimeout     = 30 * time.Second
	DefaultRetryMin        = 200 * time.Millisecond
	DefaultRetryMax        = 5 * time.Second
	DefaultStandbyRetry    = time.Second
	DefaultStatusInterval  = 250 * time.Millisecond
)

// ErrInvalidConfig wraps every configuration error of New.
var ErrInvalidConfig = errors.New("invalid cdc relay config")

// slotNameRE is what Postgres accepts as a replication slot name.
var slotNameRE = regexp.MustCompile(`^[a-z0-9_]{1,63}$`)

func (c Config) withDefaults() Config {
	c.AMQPURL = cmp.Or(c.AMQPURL, amqpx.DefaultURL)
	c.Exchange = cmp.Or(c.Exchange, relay.DefaultExchange)
	c.Table = cmp.Or(c.Table, outbox.DefaultTable)
	c.Slot = cmp.Or(c.Slot, c.Table+"_cdc")
	c.Publication = cmp.Or(c.Publication, c.Slot)
	c.Name = cmp.Or(c.Name, fmt.Sprintf("warren-cdc-relay@%s:%d", amqpx.Hostname(), os.Getpid()))
	c.Format = cmp.Or(c.Format, warren.FormatWarren)
	c.Publisher = engine.PublisherDefaults(c.Publisher, c.Name, relay.DefaultSource)
	c.BatchSize = cmp.Or(c.BatchSize, DefaultBatchSize)
	c.BatchesInFlight = cmp.Or(c.BatchesInFlight, DefaultBatchesInFlight)
	c.PublishTimeout = cmp.Or(c.PublishTimeout, DefaultPublishTimeout)
	c.MaxAttempts = cmp.Or(c.MaxAttempts, DefaultMaxAttempts)
	c.NackTimeout = cmp.Or(c.NackTimeout, DefaultNackTimeout)
	c.RetryMin = cmp.Or(c.RetryMin, DefaultRetryMin)
	c.RetryMax = cmp.Or(c.RetryMax, DefaultRetryMax)
	c.MaxMessageBytes = cmp.Or(c.MaxMessageBytes, relay.DefaultMaxMessageBytes)
	c.StandbyRetry = cmp.Or(c.StandbyRetry, DefaultStandbyRetry)
	c.StatusInterval = cmp.Or(c.StatusInterval, DefaultStatusInterval)
	c.StatsInterval = cmp.Or(c.StatsInterval, relay.DefaultStatsInterval)
	c.Logger = redact.Logger(c.Logger)
	return c
}

func (c Config) validate() error {
	var errs []error
	for name, v := range map[string]string{"Slot": c.Slot, "Publication": c.Publication} {
		if !slotNameRE.MatchString(v) {
			errs = append(errs, fmt.Errorf("%s %q: want lower-case letters, digits and underscores, at most 63 bytes", name, v))
		}
	}
	if c.BatchSize < 0 || c.BatchSize > relay.MaxBatchSize {
		errs = append(errs, fmt.Errorf("BatchSize %d: want 1 to %d", c.BatchSize, relay.MaxBatchSize))
	}
	if c.BatchesInFlight < 0 {
		errs = append(errs, fmt.Errorf("BatchesInFlight %d: want at least 1", c.BatchesInFlight))
	}
	if c.MaxAttempts < 0 {
		errs = append(errs, fmt.Errorf("MaxAttempts %d: want at least 1", c.MaxAttempts))
	}
	// What both relays check alike: a Format, MaxMessageBytes or Exchange
	// no event can get past would make every event dead, or end every
	// session.
	for _, p := range (engine.Shared{
		HasDatabase: c.Pool != nil || c.DatabaseURL != "", Table: c.Table, AMQPURL: c.AMQPURL,
		Exchange: c.Exchange, Name: c.Name, Format: c.Format, CloudEvents: c.CloudEvents, PlaneProperties: c.PlaneProperties,
		MaxMessageBytes: c.MaxMessageBytes, RetryMin: c.RetryMin, RetryMax: c.RetryMax,
		StatsInterval: c.StatsInterval,
		Durations: map[string]time.Duration{"PublishTimeout": c.PublishTimeout,
			"StandbyRetry": c.StandbyRetry, "StatusInterval": c.StatusInterval, "NackTimeout": c.NackTimeout},
	}).Problems() {
		errs = append(errs, errors.New(p))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return nil
}
