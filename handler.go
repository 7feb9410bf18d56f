package warren

import (
	"context"
	"time"
)

// Message is what a handler receives: the decoded event plus what the
// consumer knows about this delivery of it.
type Message struct {
	Event Event

	// Body is the message body exactly as it arrived. Retries and dead
	// letters re-publish these bytes, not a re-encoding of Event.
	Body []byte

	// Headers are the AMQP headers of the delivery. Handlers should treat
	// them as read-only.
	Headers map[string]any

	// Attempt is 1 on the first delivery and grows by one with each retry
	// a failure causes. Redeliveries after a crash or a shutdown do not
	// count as attempts.
	Attempt int

	// MaxAttempts is the consumer's limit: a transient failure on attempt
	// MaxAttempts dead-letters the message.
	MaxAttempts int

	// Consumer is the consumer's name, which namespaces deduplication keys.
	Consumer string

	// Queue is the queue the message was consumed from.
	Queue string

	// Redelivered is set when the broker delivered this message before
	// without an acknowledgement (a consumer crashed or shut down while
	// holding it), so the handler may already have run.
	Redelivered bool

	// ReceivedAt is when the consumer took the delivery off the channel.
	ReceivedAt time.Time
}

// LastAttempt reports whether a transient failure now would dead-letter the
// message instead of retrying it.
func (m *Message) LastAttempt() bool { return m.MaxAttempts > 0 && m.Attempt >= m.MaxAttempts }

// Handler processes one message. Its error decides the message's fate; see
// the package documentation and [Classify].
//
// A handler must return when ctx is done: the consumer cancels it after the
// shutdown grace period and when a Timeout middleware's deadline passes.
type Handler interface {
	Handle(ctx context.Context, m *Message) error
}

// HandlerFunc adapts a function to [Handler].
type HandlerFunc func(ctx context.Context, m *Message) error

// Handle calls f(ctx, m).
func (f HandlerFunc) Handle(ctx context.Context, m *Message) error { return f(ctx, m) }

// Typed returns a handler that decodes each event's payload.data into a new
// T, as [Payload.DecodeData] does (Plane's text forms included), and calls
// fn with it. Data that does not decode into T (a field of another type, a
// part that is not an object, null or none) never reaches fn: the message is
// dead-lettered at once as undecodable ([Undecodable]), its error a
// [DataError] whose Path names the field. Fields T does not have are
// ignored, so a producer may add fields before its consumers know them.
func Typed[T any](fn func(ctx context.Context, m *Message, data T) error) Handler {
	return HandlerFunc(func(ctx context.Context, m *Message) error {
		// null, which DecodeData leaves v alone for, is no T: a pointer,
		// map or slice T would reach fn nil, a struct empty.
		if raw := m.Event.Payload.Data; isNullPart(raw) {
			return Undecodable(&DataError{Path: "payload.data", msg: "payload.data is missing or null"})
		}
		var data T
		if err := m.Event.Payload.DecodeData(&data); err != nil {
			return Undecodable(err)
		}
		return fn(ctx, m, data)
	})
}

// FieldFailure is implemented by an error that names the field of an
// event that failed, and the contract it broke when a contract's check
// failed: [DataError] and contract.Violation. When such an error
// dead-letters a message, the consumer writes both into its headers
// (dlq.HeaderErrorContract, dlq.HeaderErrorField), where the dead-letter
// tools show them apart from the error's text.
type FieldFailure interface {
	error
	FailedField() (contract, path string)
}

// Middleware wraps a handler with behaviour that runs around it: filtering,
// logging, deduplication, timeouts. The first middleware in a chain is the
// outermost.
type Middleware func(next Handler) Handler

// HeaderInitiatorType is the AMQP header that repeats the event's
// initiator_type, so a broker-side tool can tell system events from user
// events without decoding the body.
const HeaderInitiatorType = "x-warren-initiator-type"

// HeaderEntityID is the AMQP header that repeats the event's entity_id.
// Every warren producer sets it (empty when the event names no entity);
// partitioned consumers (consumer.Config.Partitions) hash on it, so that
// all the events of one entity reach the same partition queue. Plane's own
// publisher does not set it.
const HeaderEntityID = "x-warren-entity-id"
