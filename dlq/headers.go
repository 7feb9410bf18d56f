package dlq

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Header names. All start with x-warren- so they never collide with a
// producer's own headers.
const (
	HeaderError            = "x-warren-error"              // last error text
	HeaderErrorClass       = "x-warren-error-class"        // a Class; only on dead messages
	HeaderErrorContract    = "x-warren-error-contract"     // the contract the event broke ("TYPE@VERSION"), if one did
	HeaderErrorField       = "x-warren-error-field"        // the event's field that failed ("payload.data.state"), if known
	HeaderAttempts         = "x-warren-attempts"           // attempts made so far
	HeaderFirstFailure     = "x-warren-first-failure"      // RFC 3339 time of the first failure
	HeaderLastFailure      = "x-warren-last-failure"       // RFC 3339 time of the latest failure
	HeaderOriginQueue      = "x-warren-origin-queue"       // queue the message failed in
	HeaderOriginExchange   = "x-warren-origin-exchange"    // exchange it was first published to
	HeaderOriginRoutingKey = "x-warren-origin-routing-key" // routing key it was first published with
	HeaderConsumer         = "x-warren-consumer"           // consumer name
	HeaderHost             = "x-warren-host"               // host the consumer ran on
	HeaderReplays          = "x-warren-replays"            // times the message was replayed from a DLQ

	// The first time RabbitMQ dead-lettered the message from its origin
	// queue, kept by [StripDeaths] when it removes the broker's own record.
	HeaderFirstDeathReason = "x-warren-first-death-reason" // "expired", "maxlen", "delivery_limit", "rejected"
	HeaderFirstDeathQueue  = "x-warren-first-death-queue"  // the queue it was dead-lettered from
	HeaderFirstDeathTime   = "x-warren-first-death-time"   // RFC 3339 time, when the broker recorded one

	// HeaderUnreadable marks a message whose headers the AMQP client
	// (amqp091-go) could not read (nested more than 32 deep, a table or
	// array of more than 8192 entries, a field of a type it does not
	// know, a content header over frame_max). warren's connections put it in place
	// of the entries at fault (all of them when the table itself is), with
	// the reason as its value, so that such a message can be read at all:
	// the consumer dead-letters it as undecodable, the dead-letter tools
	// show it. A producer who sets it itself only gets its message
	// dead-lettered as undecodable.
	HeaderUnreadable = "x-warren-unreadable-headers"
)

// Class says why a message is dead.
type Class string

// The classes of dead messages.
const (
	ClassPermanent   Class = "permanent"   // the handler said retrying cannot help
	ClassExhausted   Class = "exhausted"   // transient failures used up every attempt
	ClassUndecodable Class = "undecodable" // the body is not a valid event
	ClassUnhandled   Class = "unhandled"   // no handler matches the event type
	ClassExpired     Class = "expired"     // the message outlived its queue's TTL

	// Classes for messages the broker dead-lettered for reasons warren
	// never causes itself (a max-length policy, a quorum delivery limit, a
	// reject from other software on the queue).
	ClassMaxLen        Class = "maxlen"
	ClassDeliveryLimit Class = "delivery_limit"
	ClassRejected      Class = "rejected"
)

// Classes lists every [Class], in the order tools show them.
var Classes = []Class{ClassPermanent, ClassExhausted, ClassUndecodable, ClassUnhandled, ClassExpired, ClassMaxLen, ClassDeliveryLimit, ClassRejected}

// brokerClasses maps RabbitMQ's x-death reasons to classes.
var brokerClasses = map[string]Class{
	"expired":        ClassExpired,
	"maxlen":         ClassMaxLen,
	"delivery_limit": ClassDeliveryLimit,
	"rejected":       ClassRejected,
}

// MaxErrorLen bounds the error text stored in a header, so a handler that
// returns a huge error (a whole HTTP response) cannot bloat every message.
const MaxErrorLen = 2048

// maxFieldLen bounds a contract's or a field's name in a header.
const maxFieldLen = 256

// maxNameLen bounds a queue's, an exchange's, a routing key's, a
// consumer's or a host's name in the record: AMQP's short strings, so
// that the record stays within MaxRecordBytes.
const maxNameLen = 255

// queueSuffix ends the name of every consumer's dead-letter queue.
const queueSuffix = ".dlq"

// QueueName is the dead-letter queue of the consumer called consumer.
func QueueName(consumer string) string { return consumer + queueSuffix }

// IsQueueName reports whether name is a dead-letter queue's name as
// [QueueName] makes them: a consumer's name followed by ".dlq".
func IsQueueName(name string) bool {
	return len(name) > len(queueSuffix) && strings.HasSuffix(name, queueSuffix)
}

// ExchangeName is the dead-letter exchange of the consumer called consumer,
// where RabbitMQ sends messages that expire in its queue.
func ExchangeName(consumer string) string { return consumer + ".dlx" }

// Failure is one failed attempt, as the consumer records it.
type Failure struct {
	Err string
	// Contract and Field name the contract the event broke and the field
	// that failed, when the error said (warren.FieldFailure).
	Contract, Field string
	At              time.Time
	Queue           string // the queue the attempt consumed from
	Exchange        string // the delivery's exchange
	RoutingKey      string // the delivery's routing key
	Consumer        string
	Host            string
}

// Stamp returns a copy of headers that records f as the latest failure and
// attempts as the attempts made. The origin exchange and routing key and the
// first failure time are kept from earlier stamps, so they name where the
// message entered the system, not the retry queue it came back from. With a
// non-empty class the message is marked dead.
func Stamp(headers amqp.Table, f Failure, attempts int, class Class) amqp.Table {
	out := make(amqp.Table, len(headers)+11)
	for k, v := range headers {
		out[k] = v
	}
	at := f.At.UTC().Format(time.RFC3339Nano)
	setOnce := func(name, value string) {
		if s, ok := out[name].(string); !ok || s == "" {
			out[name] = value
		}
	}
	setOnce(HeaderFirstFailure, at)
	setOnce(HeaderOriginExchange, truncate(f.Exchange, maxNameLen))
	setOnce(HeaderOriginRoutingKey, truncate(f.RoutingKey, maxNameLen))
	out[HeaderLastFailure] = at
	out[HeaderError] = truncate(f.Err, MaxErrorLen)
	// The latest failure's, never an earlier one's: a retry that failed
	// on another field, or not on a field, must not keep the old name.
	for name, value := range map[string]string{HeaderErrorContract: f.Contract, HeaderErrorField: f.Field} {
		if value != "" {
			out[name] = truncate(value, maxFieldLen)
		} else {
			delete(out, name)
		}
	}
	out[HeaderAttempts] = int32(max(0, min(attempts, math.MaxInt32)))
	out[HeaderOriginQueue] = truncate(f.Queue, maxNameLen)
	out[HeaderConsumer] = truncate(f.Consumer, maxNameLen)
	out[HeaderHost] = truncate(f.Host, maxNameLen)
	if class != "" {
		out[HeaderErrorClass] = string(class)
	} else {
		delete(out, HeaderErrorClass)
	}
	return out
}

// brokerDeathHeaders are the headers RabbitMQ writes when it dead-letters a
// message: x-death and x-first-death-* (all versions warren supports), and
// x-last-death-* (since 3.13); and x-delivery-count, a quorum queue's count
// of the message's deliveries from it, which says nothing about the queue
// the message is published to next.
var brokerDeathHeaders = []string{
	"x-death", "x-delivery-count",
	"x-first-death-queue", "x-first-death-reason", "x-first-death-exchange",
	"x-last-death-queue", "x-last-death-reason", "x-last-death-exchange",
}

// RoutingHeaders are the headers RabbitMQ routes by besides the routing
// key (sender-selected distribution): a message published with them is
// also copied into every queue they name.
var RoutingHeaders = []string{"CC", "BCC"}

// StripDeaths returns a copy of headers without RabbitMQ's death headers
// (x-death, x-first-death-*, x-last-death-*), a quorum queue's
// x-delivery-count and the [RoutingHeaders], for a client to publish. Every
// client-side publish of a message that may carry them goes through it: the
// consumer's retries, deferrals and dead letters, and a replay or import out
// of a dead-letter queue.
//
// Keeping them loses messages. RabbitMQ drops a message, without a trace,
// when it would dead-letter it into a queue that its x-death already names
// with no rejection on the way (a "cycle"). A message that expired in queue
// N carries x-death {queue: N, reason: expired}; put back on N with that
// header and retried through a retry tier, which dead-letters back to N, it
// would vanish after its original was acked.
//
// What is worth keeping moves to warren's own headers, once: the oldest
// x-death entry that names origin (the consumer's queue the message belongs
// to; it says the broker expired, overflowed or rejected the message there)
// becomes [HeaderFirstDeathReason], [HeaderFirstDeathQueue] and
// [HeaderFirstDeathTime], unless an earlier call already recorded a first
// death. Entries naming other queues are dropped: they are the hops through
// the consumer's own retry tiers (a retry is a dead-letter by expiry) or
// another system's queues. So the record is three headers however often a
// message goes round.
//
// The routing headers go because the client that re-publishes is not the
// producer: a producer's CC kept on a retry, a dead letter or a replay
// would have the broker copy the message, with the consumer's or the
// operator's rights, into every queue it names. headers itself is not
// changed.
func StripDeaths(headers amqp.Table, origin string) amqp.Table {
	out := maps.Clone(headers)
	if _, recorded := out[HeaderFirstDeathReason]; !recorded && origin != "" {
		// x-death lists the most recent death first; the oldest is last.
		deaths := reader{h: headers, m: &Metadata{}}.deaths()
		for i := len(deaths) - 1; i >= 0; i-- {
			d := deaths[i]
			if _, known := brokerClasses[d.Reason]; d.Queue != origin || !known {
				continue
			}
			out[HeaderFirstDeathReason] = d.Reason
			out[HeaderFirstDeathQueue] = d.Queue
			if !d.Time.IsZero() {
				out[HeaderFirstDeathTime] = d.Time.UTC().Format(time.RFC3339Nano)
			}
			break
		}
	}
	for _, name := range brokerDeathHeaders {
		delete(out, name)
	}
	for _, name := range RoutingHeaders {
		delete(out, name)
	}
	return out
}

// historyHeaders are the headers that record a message's failures: every
// header this package defines, as [Stamp], [StripDeaths] and a replay write
// them. The root package's x-warren-initiator-type is not among them: a
// producer sets it by design.
var historyHeaders = []string{
	HeaderError, HeaderErrorClass, HeaderErrorContract, HeaderErrorField, HeaderAttempts, HeaderFirstFailure, HeaderLastFailure,
	HeaderOriginQueue, HeaderOriginExchange, HeaderOriginRoutingKey, HeaderConsumer, HeaderHost,
	HeaderReplays, HeaderFirstDeathReason, HeaderFirstDeathQueue, HeaderFirstDeathTime,
}

// StripHistory returns headers without any record of earlier failures:
// warren's dead-letter metadata (every header this package defines) and
// RabbitMQ's death headers. Other headers (a traceparent, the initiator
// type, a producer's own) are kept. headers itself is not changed: it is
// returned as it is when it holds no such record (a producer's message,
// the common case, costs no copy), and a copy without them otherwise.
//
// The consumer applies it to a delivery a producer published: whoever may
// publish to the consumer's exchange can set any of these headers, and
// trusting them would let a producer spend the event's attempts
// (x-warren-attempts), or name the queue an operator's replay publishes
// into (x-warren-origin-queue). Such a delivery is a first delivery, and
// its history is the one warren stamps from then on.
func StripHistory(headers amqp.Table) amqp.Table {
	has := func(name string) bool { _, ok := headers[name]; return ok }
	if !slices.ContainsFunc(historyHeaders, has) && !slices.ContainsFunc(brokerDeathHeaders, has) {
		return headers
	}
	out := maps.Clone(headers)
	for _, name := range historyHeaders {
		delete(out, name)
	}
	for _, name := range brokerDeathHeaders {
		delete(out, name)
	}
	return out
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…(truncated)"
}

// Death is one entry of RabbitMQ's x-death header: the broker's own record
// of a message being dead-lettered from a queue.
type Death struct {
	Queue       string
	Reason      string // "expired", "rejected", "maxlen", "delivery_limit"
	Exchange    string
	RoutingKeys []string
	Count       int64
	Time        time.Time
}

// Metadata is everything the headers of a message say about its failures.
type Metadata struct {
	Error            string
	Class            Class
	Contract         string // the contract the event broke, when one did
	Field            string // the event's field that failed, when known
	Attempts         int
	FirstFailure     time.Time
	LastFailure      time.Time
	OriginQueue      string
	OriginExchange   string
	OriginRoutingKey string
	Consumer         string
	Host             string
	Replays          int
	Deaths           []Death // x-death, most recent first

	// FirstDeath is the broker's first dead-lettering of the message from
	// its origin queue, as [StripDeaths] recorded it before removing
	// x-death (Queue, Reason and Time only); zero when none was recorded.
	FirstDeath Death

	// Problems lists headers that were present but unreadable. Headers come
	// from outside and are not trusted; a bad one is reported, not fatal.
	Problems []string
}

// ParseMetadata reads the failure metadata from a message's headers. It
// never fails: headers of unexpected types are listed in Problems. A message
// that carries no class of warren's but whose latest x-death entry says
// "expired" is classed [ClassExpired], with its origin taken from x-death.
func ParseMetadata(headers amqp.Table) Metadata {
	var m Metadata
	r := reader{h: headers, m: &m}
	m.Error = r.str(HeaderError)
	m.Class = Class(r.str(HeaderErrorClass))
	m.Contract = r.str(HeaderErrorContract)
	m.Field = r.str(HeaderErrorField)
	m.Attempts = r.int(HeaderAttempts)
	m.FirstFailure = r.time(HeaderFirstFailure)
	m.LastFailure = r.time(HeaderLastFailure)
	m.OriginQueue = r.str(HeaderOriginQueue)
	m.OriginExchange = r.str(HeaderOriginExchange)
	m.OriginRoutingKey = r.str(HeaderOriginRoutingKey)
	m.Consumer = r.str(HeaderConsumer)
	m.Host = r.str(HeaderHost)
	m.Replays = r.int(HeaderReplays)
	m.Deaths = r.deaths()
	m.FirstDeath = Death{
		Reason: r.str(HeaderFirstDeathReason),
		Queue:  r.str(HeaderFirstDeathQueue),
		Time:   r.time(HeaderFirstDeathTime),
	}

	// A message without warren's class was dead-lettered by the broker
	// itself; its latest x-death entry says why and from where.
	if m.Class == "" && len(m.Deaths) > 0 {
		d := m.Deaths[0]
		if class, ok := brokerClasses[d.Reason]; ok {
			m.Class = class
			m.OriginQueue = d.Queue
			if m.OriginExchange == "" {
				m.OriginExchange = d.Exchange
				if len(d.RoutingKeys) > 0 {
					m.OriginRoutingKey = d.RoutingKeys[0]
				}
			}
			// An error text left by an earlier retry is not why the message
			// died; keep it only as context.
			why := fmt.Sprintf("dead-lettered by the broker (%s) from queue %s", d.Reason, d.Queue)
			if m.Error != "" {
				why += "; last handler error before that: " + m.Error
			}
			m.Error = why
			if d.Time.After(m.LastFailure) {
				m.LastFailure = d.Time
			}
			if m.FirstFailure.IsZero() {
				m.FirstFailure = d.Time
			}
		}
	}
	// Neither warren nor the broker says why it died, and its headers
	// could not be read (they may have held the record): that is why.
	if m.Class == "" {
		if why := r.str(HeaderUnreadable); why != "" {
			m.Class, m.Error = ClassUndecodable, why
		}
	}
	return m
}

type reader struct {
	h amqp.Table
	m *Metadata
}

func (r reader) problem(name string, v any, want string) {
	r.m.Problems = append(r.m.Problems, fmt.Sprintf("header %s: want %s, got %T", name, want, v))
}

func (r reader) str(name string) string {
	v, ok := r.h[name]
	if !ok || v == nil {
		return ""
	}
	switch s := v.(type) {
	case string:
		return s
	case []byte:
		return string(s)
	}
	r.problem(name, v, "a string")
	return ""
}

func (r reader) int(name string) int {
	v, ok := r.h[name]
	if !ok || v == nil {
		return 0
	}
	if n, ok := toInt64(v); ok {
		return int(n)
	}
	if s, ok := v.(string); ok {
		if n, err := strconv.Atoi(s); err == nil {
			return n
		}
	}
	r.problem(name, v, "an integer")
	return 0
}

func (r reader) time(name string) time.Time {
	v, ok := r.h[name]
	if !ok || v == nil {
		return time.Time{}
	}
	switch t := v.(type) {
	case time.Time:
		return t
	case string:
		if parsed, err := time.Parse(time.RFC3339Nano, t); err == nil {
			return parsed
		}
	}
	r.problem(name, v, "an RFC 3339 time")
	return time.Time{}
}

func (r reader) deaths() []Death {
	v, ok := r.h["x-death"]
	if !ok || v == nil {
		return nil
	}
	list, ok := v.([]any)
	if !ok {
		r.problem("x-death", v, "an array")
		return nil
	}
	var out []Death
	for i, item := range list {
		t, ok := item.(amqp.Table)
		if !ok {
			r.problem(fmt.Sprintf("x-death[%d]", i), item, "a table")
			continue
		}
		d := Death{}
		d.Queue, _ = t["queue"].(string)
		d.Reason, _ = t["reason"].(string)
		d.Exchange, _ = t["exchange"].(string)
		d.Count, _ = toInt64(t["count"])
		d.Time, _ = t["time"].(time.Time)
		if keys, ok := t["routing-keys"].([]any); ok {
			for _, k := range keys {
				if s, ok := k.(string); ok {
					d.RoutingKeys = append(d.RoutingKeys, s)
				}
			}
		}
		out = append(out, d)
	}
	return out
}

func toInt64(v any) (int64, bool) {
	switch n := v.(type) {
	case int:
		return int64(n), true
	case int8:
		return int64(n), true
	case int16:
		return int64(n), true
	case int32:
		return int64(n), true
	case int64:
		return n, true
	case uint8:
		return int64(n), true
	case uint16:
		return int64(n), true
	case uint32:
		return int64(n), true
	case uint64:
		if n > math.MaxInt64 {
			return 0, false
		}
		return int64(n), true
	}
	return 0, false
}
