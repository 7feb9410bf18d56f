package amqpx

import (
	"fmt"
	"maps"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/cloudevents"
)

// EventPublishing is [EncodedPublishing] in warren's default format, for an
// event that did not come from an outbox.
func EventPublishing(ev warren.Event) (amqp.Publishing, error) {
	return EncodedPublishing(warren.Encoder{}, ev, 0)
}

// EncodedPublishing encodes ev as the message every warren producer sends:
// the JSON envelope in enc's format as the body (outboxID is the outbox row
// it came from, 0 if none), and the AMQP properties that let the broker
// and tools route and inspect it without decoding the body (message_id =
// event_id, type = event_type, persistent, the creation time, and the
// initiator type and entity id as headers; a partitioned consumer hashes
// on the entity id header, [warren.HeaderEntityID]). The properties are the same in every
// format. Plane's publisher sets persistent delivery, the JSON content
// type, a timestamp and content_encoding "utf-8"; the relay sets the first
// three and adds the others, which a Plane consumer, reading only the
// body, ignores. It sets no content_encoding: the body is UTF-8 JSON
// without one, Plane's consumers never read it, and a warren consumer
// older than the one that takes "utf-8" as identity would dead-letter
// every message carrying it, so a relay upgraded first would break them.
//
// An event whose properties and headers would not fit [MaxContentHeader]
// is an error: published, it would close the connection, and a relay
// would meet it first again in every session. A caller that adds headers
// (the trace context) checks again with [CheckContentHeader].
func EncodedPublishing(enc warren.Encoder, ev warren.Event, outboxID int64) (amqp.Publishing, error) {
	if err := ev.Validate(); err != nil {
		return amqp.Publishing{}, err
	}
	body, err := enc.Encode(ev, outboxID)
	if err != nil {
		return amqp.Publishing{}, fmt.Errorf("encode event %s: %w", ev.ID, err)
	}
	return publishing(ev, "application/json", nil, body)
}

// CloudEventPublishing is [EncodedPublishing] for a CloudEvent: the same
// properties and headers, with the content type, headers and body enc
// writes (binary mode: the attributes as cloudEvents: headers and the
// payload as the body; structured mode: the whole event as the body).
func CloudEventPublishing(enc cloudevents.Encoder, ev warren.Event) (amqp.Publishing, error) {
	if err := ev.Validate(); err != nil {
		return amqp.Publishing{}, err
	}
	m, err := enc.Encode(ev)
	if err != nil {
		return amqp.Publishing{}, fmt.Errorf("encode event %.80s as a CloudEvent: %w", ev.ID, err)
	}
	return publishing(ev, m.ContentType, m.Headers, m.Body)
}

// publishing is the message of ev with body, of contentType, with warren's
// headers and extra ones.
func publishing(ev warren.Event, contentType string, extra amqp.Table, body []byte) (amqp.Publishing, error) {
	ts := ev.CreatedAt
	if ts.IsZero() {
		ts = time.Now()
	}
	headers := make(amqp.Table, 2+len(extra))
	maps.Copy(headers, extra)
	headers[warren.HeaderInitiatorType], headers[warren.HeaderEntityID] = ev.InitiatorType, ev.EntityID
	msg := amqp.Publishing{
		MessageId:    ev.ID,
		Type:         ev.Type,
		ContentType:  contentType,
		DeliveryMode: amqp.Persistent,
		Timestamp:    ts.UTC(),
		Headers:      headers,
		Body:         body,
	}
	if err := CheckContentHeader(msg); err != nil {
		return amqp.Publishing{}, fmt.Errorf("event %.80s: %w", ev.ID, err)
	}
	return msg, nil
}
