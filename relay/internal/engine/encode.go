package engine

import (
	"cmp"
	"fmt"
	"maps"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/cloudevents"
	"github.com/warrenmq/warren/internal/amqpx"
	"github.com/warrenmq/warren/internal/tracecontext"
	"github.com/warrenmq/warren/outbox"
)

// PlaneProperties leaves msg with exactly the properties Plane's publisher
// sets (its event_stream/publisher.py): persistent delivery, content type
// application/json, content encoding utf-8 and now, in seconds, as the
// timestamp; the body as it is, and nothing else.
func PlaneProperties(msg *amqp.Publishing, now time.Time) {
	*msg = amqp.Publishing{
		DeliveryMode:    amqp.Persistent,
		ContentType:     "application/json",
		ContentEncoding: "utf-8",
		Timestamp:       now.Truncate(time.Second),
		Body:            msg.Body,
	}
}

// Encoding is how a relay writes its events: in an envelope format, or as
// CloudEvents when CloudEvents is set.
type Encoding struct {
	Envelope    warren.Encoder
	CloudEvents *cloudevents.Encoder
	// DefaultVersion is a CloudEvent's version when its event has none:
	// on Plane's table, the version Plane's envelope would have said.
	DefaultVersion string
}

// Encode returns the message for row: its event encoded by enc, with the
// headers both relays publish. It fails, so that the row is dead rather
// than retried for ever, when the row did not decode, when the body is
// over maxBytes, or when the headers with the row's trace context would
// not fit one content-header frame: a tracestate written by SQL may be any
// size, and over frame_max it would close the connection at every attempt,
// the same row first.
//
// The message returned carries no trace context; the caller adds the
// row's (tracecontext.Inject) or its own span's, which is never longer.
func Encode(enc Encoding, row outbox.Row, maxBytes int) (amqp.Publishing, error) {
	if row.DecodeErr != nil {
		return amqp.Publishing{}, row.DecodeErr
	}
	var msg amqp.Publishing
	var err error
	if enc.CloudEvents != nil {
		ev := row.Event
		ev.Version = cmp.Or(ev.Version, enc.DefaultVersion)
		msg, err = amqpx.CloudEventPublishing(*enc.CloudEvents, ev)
	} else {
		msg, err = amqpx.EncodedPublishing(enc.Envelope, row.Event, row.ID)
	}
	if err != nil {
		return amqp.Publishing{}, err
	}
	if len(msg.Body) > maxBytes {
		return amqp.Publishing{}, fmt.Errorf("encoded event is %d bytes, more than MaxMessageBytes (%d)", len(msg.Body), maxBytes)
	}
	probe := msg
	probe.Headers = tracecontext.Inject(maps.Clone(msg.Headers), row.TraceParent, row.TraceState)
	if err := amqpx.CheckContentHeader(probe); err != nil {
		return amqp.Publishing{}, fmt.Errorf("event %.80s with its trace context: %w", row.Event.ID, err)
	}
	return msg, nil
}
