package consumer

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"
	"unicode"

	"go.opentelemetry.io/otel/trace"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/dlq"
	"github.com/warrenmq/warren/internal/amqpx"
	"github.com/warrenmq/warren/internal/redact"
)

// QueueType selects the RabbitMQ queue type for the consumer's queues.
type QueueType string

const (
	// Classic queues: the default, fastest on a single node.
	Classic QueueType = "classic"
	// Quorum queues: replicated, for clusters that must survive a node loss.
	// Dead-lettering from them is declared at-least-once.
	Quorum QueueType = "quorum"
)

// UnhandledPolicy says what happens to an event no registered handler
// matches.
type UnhandledPolicy uint8

const (
	// AckUnhandled acknowledges the event and counts it as skipped (and
	// as Stats.Unrouted). On a fanout exchange every consumer sees every
	// event, so this is the default. Such an event passes no middleware:
	// a dedup store keeps no key for it, and a middleware meant to see
	// every event needs a handler for the prefix "" beside it (every event
	// is routed then). A middleware that rewrites event types (an upcaster
	// from legacy names) does not run before the route is chosen: register
	// a handler for the old prefix, or set DeadLetterUnhandled, under which
	// every event passes the chain. The consumer warns, per event
	// type, when the first one arrives and every 10 minutes after, naming
	// the prefixes it handles: a mistyped prefix shows there. It names at
	// most the first 1000 distinct types of the process's life; later ones
	// are counted in Stats.Unrouted without a warning.
	AckUnhandled UnhandledPolicy = iota
	// DeadLetterUnhandled sends it to the DLQ with class "unhandled", for
	// consumers that must handle every event type they receive.
	DeadLetterUnhandled
)

// Config configures a [BaseConsumer]. The zero value of every field but
// Name means its documented default.
type Config struct {
	// URL of the broker, or of several nodes of one cluster separated by
	// commas ("amqp://u:p@node1:5672/,amqp://u:p@node2:5672/"). Each
	// connection goes to a node picked at random and, when that node is
	// lost or refuses, to the next, with the reconnect backoff between
	// rounds over the list. Default AMQP_URL's usual local value,
	// amqp://guest:guest@127.0.0.1:5672/. Logged only with the passwords
	// redacted.
	URL string

	// Name is the consumer's name: its queue is Name, its retry queues
	// Name.retry.<delay>. It also namespaces deduplication keys. Required.
	Name string

	// Exchange is the durable fanout exchange the queue binds to. Default
	// "warren.events".
	Exchange string

	// DeadLetterQueue is the queue dead messages go to; its name ends in
	// ".dlq", by which warren dlq recognises a dead-letter queue. Default
	// Name.dlq (dlq.QueueName). `warren dlq replay` sends messages back to
	// the queue named by removing ".dlq", so with another DeadLetterQueue
	// replay with --to Name.
	DeadLetterQueue string

	// DeadLetterExchange is the fanout exchange the queue sends messages
	// that expire in it to, and DeadLetterQueue is bound to. Default
	// Name.dlx (dlq.ExchangeName). A fanout exchange delivers to every
	// queue bound to it, so an exchange other queues dead-letter to as
	// well (Plane's plane.event_stream.dlq) brings their expired messages
	// into this consumer's DLQ too; see AdoptQueue.
	DeadLetterExchange string

	// AdoptQueue makes the consumer take its queue as it exists, with the
	// arguments it was declared with (by Plane, say), instead of failing
	// when they differ from this config. The consumer learns them from the
	// broker at each start, logs them, and declares only what is missing:
	// the DLQ, the retry tiers and the bindings. The queue's own message
	// TTL and dead-letter exchange then apply, whatever MessageTTL and
	// DeadLetterExchange say: the DLQ is bound to the queue's dead-letter
	// exchange only when DeadLetterExchange names it (only the operator
	// knows whether other queues dead-letter there); otherwise messages
	// expiring in the queue go where its arguments say, and where nothing
	// is bound (Plane binds nothing to plane.event_stream.dlq), the broker
	// drops them, as before. A queue that does not exist at start is a
	// TopologyError, nothing to adopt, and nothing is declared: declared
	// from this config, the queue could not be declared again by its owner
	// (a rollback would fail). One adopted and then deleted while Run goes
	// on is declared again with the arguments it was adopted with. Retries
	// and the consumer's own dead letters do not depend on the queue's
	// arguments. Default false: a queue with other arguments is a
	// TopologyError.
	AdoptQueue bool

	// Partitions turns on partitioned consumption for ordered scale-out
	// (docs/partitions.md): instead of the queue Name, the consumer
	// declares an x-consistent-hash exchange Name.partitions bound to
	// Exchange, hashing on the warren.HeaderEntityID header, and the
	// partition queues Name.p0 … Name.p<Partitions-1>, each with
	// x-single-active-consumer and the arguments the queue would have
	// had (MessageTTL, the dead-letter exchange, QueueType,
	// DeliveryLimit). Each replica subscribes to every partition queue;
	// the broker makes one of them active per partition, and replicas
	// hand partitions on to spread them (at most ceil(Partitions/replicas)
	// each). Within a partition events are handled one at a time in queue
	// order: a transient failure is retried in place, holding the
	// partition, after RetryDelays (each capped at 30s) until
	// MaxAttempts, then dead-lettered; no retry tiers are declared.
	// Channels and Workers do not apply: each partition has its own
	// channel, with Prefetch capped at MaxPartitionPrefetch (16), and runs
	// one handler at a time. AdoptQueue
	// cannot be combined with it. The broker needs the
	// rabbitmq_consistent_hash_exchange plugin. Events without the header
	// (Plane's publisher does not set it) all go to one partition.
	// Changing Partitions reassigns entities to partitions: drain the
	// partition queues first. Default 0: off, one shared queue.
	Partitions int

	// Channels is how many AMQP channels consume in parallel, each with
	// its own prefetch window and acknowledgements. Default 4.
	Channels int

	// Prefetch is the number of unacknowledged messages the broker sends
	// ahead on each channel. Default 256; with Partitions, at most
	// MaxPartitionPrefetch.
	Prefetch int

	// Workers is how many handlers run at once. Default 16.
	Workers int

	// MessageTTL is how long a message may wait in the queue before the
	// broker dead-letters it (class "expired"). Default 1h; negative means
	// no limit.
	MessageTTL time.Duration

	// DLQTTL is how long dead messages are kept. Default 7 days; negative
	// means forever.
	DLQTTL time.Duration

	// RetryDelays are the fixed delays of the retry tiers, ascending. A
	// transient failure on attempt n waits RetryDelays[n-1] (the last one
	// for later attempts); a handler's RetryAfter hint picks the smallest
	// tier at least that long. Default 1s, 10s, 1m, 10m.
	RetryDelays []time.Duration

	// MaxAttempts is how many times a message is tried before a transient
	// failure dead-letters it (class "exhausted"). Default 5.
	MaxAttempts int

	// QueueType is Classic (default) or Quorum.
	QueueType QueueType

	// DeliveryLimit, for quorum queues, dead-letters a message the broker
	// has delivered this many times without an ack (class
	// "delivery_limit"): a message that crashes the process, which never
	// gets to count a failed attempt, stops being redelivered forever.
	// Shutdown requeues count too, so leave room for them; with
	// Partitions so does every hand-over of a partition, for each
	// delivery prefetched behind the one in flight (docs/partitions.md).
	// Classic queues
	// cannot count deliveries. Default 0: no limit.
	DeliveryLimit int

	// Unhandled says what happens to events no handler matches. Default
	// AckUnhandled.
	Unhandled UnhandledPolicy

	// ShutdownGrace is how long in-flight handlers may run after Run's
	// context ends, or, with Partitions, after their partition is
	// released to another replica. Then their contexts are cancelled and
	// their messages requeued. Default 30s.
	ShutdownGrace time.Duration

	// StuckAfter is how long handlers may hold deliveries without any of
	// them finishing before /healthz reports the consumer stuck (Health's
	// Stuck), so that an orchestrator restarts a process whose handlers
	// hang, and the broker redelivers what they held. Set it above the
	// longest a handler may legitimately run. Default 10m; negative never
	// reports stuck.
	StuckAfter time.Duration

	// PublishTimeout bounds the wait for the broker's confirm of each
	// retry or dead-letter publish (the one after a deleted queue was
	// declared again gets its own). Default 10s.
	PublishTimeout time.Duration

	// MaxBodyBytes is the largest body the consumer decodes; larger ones
	// are dead-lettered as undecodable. Default 1 MiB. It does not bound
	// memory: the broker sends bodies up to its max_message_size before
	// the consumer sees them (see MemoryBudget).
	MaxBodyBytes int

	// MemoryBudget bounds the bytes of message bodies the consumer may
	// hold: Channels × prefetch × the broker's max_message_size in
	// unacknowledged deliveries, plus Workers × min(MaxBodyBytes,
	// max_message_size) for the decoded copies. Each session lowers its
	// prefetch per channel until that fits (Health's Prefetch says to
	// what), and Run fails with ErrOverMemoryBudget when even a prefetch
	// of 1 does not. A limit the consumer does not know (the broker
	// accepted the probe, or the probe failed; see BrokerMaxMessageSize)
	// is planned at RabbitMQ's maximum, 512 MiB, so that the budget holds
	// however far the limit was raised: set BrokerMaxMessageSize, or a
	// broker limit the probe can read, to plan with the real one. Go's
	// heap grows to about twice the live bytes before it collects
	// (GOGC=100); set GOMEMLIMIT accordingly. Default 0: no budget; the
	// worst case is logged at start (for an unknown limit, as a range:
	// worst_case_bytes_at_least, _at_default for the broker version's
	// default, and _at_most), with a warning above 1 GiB when a stated
	// limit is above MaxBodyBytes.
	MemoryBudget int64

	// BrokerMaxMessageSize is the broker's max_message_size in bytes, for
	// an operator who knows it. Set, it is trusted and the consumer does
	// not probe for it; a user without write permission on the default
	// exchange, which the probe publishes to, should set it. Default 0:
	// each session reads the limit by publishing one body of
	// MaxBodyBytes+1 bytes that no queue receives, on a short connection
	// of its own (the body is allocated for the probe and dropped after
	// it, before the session consumes). A broker whose limit is at most
	// MaxBodyBytes refuses it and names the limit; one that accepts it
	// leaves the limit unknown, anywhere up to RabbitMQ's maximum of
	// 512 MiB (see MemoryBudget).
	BrokerMaxMessageSize int64

	// ReconnectMaxDelay caps the wait between reconnect attempts, which
	// grows exponentially with jitter from 100ms. Default 15s.
	ReconnectMaxDelay time.Duration

	// Logger receives the consumer's own log lines (connection changes,
	// dead letters, publish failures), redacted (internal/redact):
	// credentials in them are masked. [BaseConsumer.Config] returns it
	// redacting, for the service's own lines. Default slog.Default().
	Logger *slog.Logger

	// Observer, when set, is told of every delivery received and settled
	// and of every connection change: the hook for metrics (package
	// warrenprom). Default nil.
	Observer Observer

	// TracerProvider, when set, makes the consumer record a span around
	// each handler, a child of the trace context the message carries.
	// Default nil: no spans; a traceparent header still reaches the
	// handler's context as its remote parent.
	TracerProvider trace.TracerProvider

	// Dependencies are the services the middleware needs for every
	// message, as the middleware reports them (middleware.DedupOptions's
	// Health). Health lists their states, and /readyz fails while one is
	// down; /healthz does not, since a restart cannot bring a store back.
	// Default none.
	Dependencies []*warren.Dependency
}

// Defaults applied by [New].
const (
	DefaultExchange          = "warren.events"
	DefaultChannels          = 4
	DefaultPrefetch          = 256
	DefaultWorkers           = 16
	DefaultMessageTTL        = time.Hour
	DefaultDLQTTL            = 7 * 24 * time.Hour
	DefaultMaxAttempts       = 5
	DefaultShutdownGrace     = 30 * time.Second
	DefaultStuckAfter        = 10 * time.Minute
	DefaultPublishTimeout    = 10 * time.Second
	DefaultMaxBodyBytes      = 1 << 20
	DefaultReconnectMaxDelay = 15 * time.Second

	// MaxPartitions bounds Config.Partitions: each partition is a queue
	// and, on every replica, a channel.
	MaxPartitions = 256

	// MaxPartitionPrefetch caps Config.Prefetch with Config.Partitions: a
	// partition handles one delivery at a time, and what is prefetched
	// behind it only waits, returns to the queue at every hand-over (on a
	// quorum queue each return counts towards x-delivery-limit), and can
	// outlive the broker's consumer_timeout behind a long retry in place.
	MaxPartitionPrefetch = 16
)

// DefaultRetryDelays are the retry tiers used when Config.RetryDelays is
// empty.
var DefaultRetryDelays = []time.Duration{time.Second, 10 * time.Second, time.Minute, 10 * time.Minute}

// ErrInvalidConfig is wrapped by every error New returns for a bad Config.
var ErrInvalidConfig = errors.New("invalid consumer config")

func (c Config) withDefaults() Config {
	c.URL = cmp.Or(c.URL, amqpx.DefaultURL)
	c.Exchange = cmp.Or(c.Exchange, DefaultExchange)
	c.DeadLetterQueue = cmp.Or(c.DeadLetterQueue, dlq.QueueName(c.Name))
	c.DeadLetterExchange = cmp.Or(c.DeadLetterExchange, dlq.ExchangeName(c.Name))
	c.Channels = cmp.Or(c.Channels, DefaultChannels)
	c.Prefetch = cmp.Or(c.Prefetch, DefaultPrefetch)
	c.Workers = cmp.Or(c.Workers, DefaultWorkers)
	if c.Partitions > 0 {
		// One channel and one handler at a time per partition; the memory
		// plan and the publisher are sized from these.
		c.Channels, c.Workers = c.Partitions, c.Partitions
		c.Prefetch = min(c.Prefetch, MaxPartitionPrefetch)
	}
	c.MessageTTL = cmp.Or(c.MessageTTL, DefaultMessageTTL)
	c.DLQTTL = cmp.Or(c.DLQTTL, DefaultDLQTTL)
	c.MaxAttempts = cmp.Or(c.MaxAttempts, DefaultMaxAttempts)
	c.QueueType = cmp.Or(c.QueueType, Classic)
	c.ShutdownGrace = cmp.Or(c.ShutdownGrace, DefaultShutdownGrace)
	c.StuckAfter = cmp.Or(c.StuckAfter, DefaultStuckAfter)
	c.PublishTimeout = cmp.Or(c.PublishTimeout, DefaultPublishTimeout)
	c.MaxBodyBytes = cmp.Or(c.MaxBodyBytes, DefaultMaxBodyBytes)
	c.ReconnectMaxDelay = cmp.Or(c.ReconnectMaxDelay, DefaultReconnectMaxDelay)
	if len(c.RetryDelays) == 0 {
		c.RetryDelays = DefaultRetryDelays
	}
	c.RetryDelays = slices.Clone(c.RetryDelays)
	// Every line logged through the consumer's logger, the service's own
	// included (Config().Logger), goes through the one redaction step.
	c.Logger = redact.Logger(c.Logger)
	return c
}

func (c Config) validate() error {
	if c.Name == "" {
		// Alone: the queue, its retry tiers, the dead-letter queue and
		// exchange are all named after it, and their defaults' errors
		// would only point away from the one fix.
		return fmt.Errorf("%w: Name is required: the consumer's queue, e.g. consumer.Config{Name: \"billing\"}; its retry tiers and dead-letter queue are named after it", ErrInvalidConfig)
	}
	var problems []string
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	if err := validateName("Name", c.Name); err != nil {
		add("%v", err)
	}
	if err := validateName("Exchange", c.Exchange); err != nil {
		add("%v", err)
	}
	if err := validateName("DeadLetterQueue", c.DeadLetterQueue); err != nil {
		add("%v", err)
	} else if !dlq.IsQueueName(c.DeadLetterQueue) {
		// warren dlq tells a dead-letter queue by its name: an import
		// into one keeps the failure record, into any other queue resets it.
		add("DeadLetterQueue %q must end in %q, as warren dlq recognises dead-letter queues by name", c.DeadLetterQueue, dlq.QueueName(""))
	}
	if err := validateName("DeadLetterExchange", c.DeadLetterExchange); err != nil {
		add("%v", err)
	}
	if c.DeadLetterExchange == c.Exchange {
		// Expired messages would go back to every consumer of the exchange.
		add("DeadLetterExchange must differ from Exchange %q", c.Exchange)
	}
	if c.DeadLetterQueue == c.Name {
		add("DeadLetterQueue %q must differ from the consumer's queue", c.DeadLetterQueue)
	}
	if err := amqpx.CheckURL(c.URL); err != nil {
		add("URL: %v", err)
	}
	for name, v := range map[string]int{"Channels": c.Channels, "Prefetch": c.Prefetch, "Workers": c.Workers, "MaxAttempts": c.MaxAttempts, "MaxBodyBytes": c.MaxBodyBytes} {
		if v < 0 {
			add("%s must not be negative, got %d", name, v)
		}
	}
	if c.Prefetch > 65535 {
		add("Prefetch must be at most 65535, got %d", c.Prefetch)
	}
	if c.MemoryBudget < 0 {
		add("MemoryBudget must not be negative, got %d", c.MemoryBudget)
	}
	if c.BrokerMaxMessageSize < 0 || c.BrokerMaxMessageSize > rabbitHardMaxMessageSize {
		add("BrokerMaxMessageSize must be between 0 and RabbitMQ's maximum %d, got %d", rabbitHardMaxMessageSize, c.BrokerMaxMessageSize)
	}
	if c.Partitions < 0 || c.Partitions > MaxPartitions {
		add("Partitions must be between 0 and %d, got %d", MaxPartitions, c.Partitions)
	}
	if c.Partitions > 0 && c.AdoptQueue {
		add("AdoptQueue cannot be combined with Partitions: partitioned consumption declares its own partition queues")
	}
	if c.DeliveryLimit < 0 {
		add("DeliveryLimit must not be negative, got %d", c.DeliveryLimit)
	}
	if c.DeliveryLimit > 0 && c.QueueType != Quorum {
		add("DeliveryLimit needs QueueType Quorum: classic queues do not count deliveries")
	}
	if c.QueueType != Classic && c.QueueType != Quorum {
		add("QueueType must be %q or %q, got %q", Classic, Quorum, c.QueueType)
	}
	if c.Unhandled > DeadLetterUnhandled {
		add("Unhandled must be AckUnhandled or DeadLetterUnhandled")
	}
	for i, d := range c.RetryDelays {
		switch {
		case d < time.Millisecond:
			add("RetryDelays[%d] must be at least 1ms, got %v", i, d)
		case i > 0 && d <= c.RetryDelays[i-1]:
			add("RetryDelays must be strictly ascending, got %v after %v", d, c.RetryDelays[i-1])
		}
	}
	for name, d := range map[string]time.Duration{"ShutdownGrace": c.ShutdownGrace, "PublishTimeout": c.PublishTimeout, "ReconnectMaxDelay": c.ReconnectMaxDelay} {
		if d < 0 {
			add("%s must not be negative, got %v", name, d)
		}
	}
	if slices.Contains(c.Dependencies, nil) {
		add("Dependencies must not contain nil")
	}
	if len(problems) > 0 {
		slices.Sort(problems)
		return fmt.Errorf("%w: %s", ErrInvalidConfig, strings.Join(problems, "; "))
	}
	return nil
}

// maxNameLen leaves room under RabbitMQ's 255-byte limit for the suffixes
// warren adds (".retry.10m", ".dlq").
const maxNameLen = 200

func validateName(field, name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%s is required", field)
	case len(name) > maxNameLen:
		return fmt.Errorf("%s must be at most %d bytes, got %d", field, maxNameLen, len(name))
	case strings.HasPrefix(name, "amq."):
		return fmt.Errorf("%s %q uses the broker's reserved prefix \"amq.\"", field, name)
	case strings.IndexFunc(name, func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) }) >= 0:
		return fmt.Errorf("%s %q must not contain spaces or control characters", field, name)
	}
	return nil
}
