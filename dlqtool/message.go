package dlqtool

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/dlq"
)

// Message is one dead message as read from a dead-letter queue: the AMQP
// message itself (body, properties, headers) and what its headers say about
// how it died.
type Message struct {
	// Position is the message's place in the queue when it was read,
	// counting from 0 at the head.
	Position int
	// EventID is the message_id property, or else the body's event_id.
	// A [Filter] by event id matches either.
	EventID string
	// EventType is the type property, or else the body's event_type.
	EventType string
	// Metadata is the decoded failure record ([dlq.ParseMetadata]).
	Metadata dlq.Metadata

	amqp.Publishing

	// replayTo is where a replay of the queue the message was read from
	// sends it; empty for a message read from a file.
	replayTo string
	// bodySize is the size of the body, for a message read from a file
	// without it (the checking pass of an import).
	bodySize int
}

// newMessage reads a message from its AMQP form.
func newMessage(position int, p amqp.Publishing) Message {
	m := Message{Position: position, Publishing: p, Metadata: dlq.ParseMetadata(p.Headers)}
	m.EventID, m.EventType = p.MessageId, p.Type
	if m.EventID == "" || m.EventType == "" {
		id, typ := dlq.BodyEvent(p.Body)
		m.EventID, m.EventType = cmp.Or(m.EventID, id), cmp.Or(m.EventType, typ)
	}
	return m
}

// Signature is the message's failure signature, [dlq.Signature] of its
// class and error text: what [Filter].Signatures matches and the console
// groups by.
func (m *Message) Signature() string { return dlq.Signature(m.Metadata.Class, m.Metadata.Error) }

// Fingerprint identifies the message by its content: properties, headers
// and body (not its position, which changes as messages ahead of it leave,
// nor the headers the broker changes when it hands a message back:
// readHeaders). Two reads of one message give the same fingerprint; two
// messages share one only when they are identical copies.
// [Filter].Fingerprints selects by it.
func (m *Message) Fingerprint() string {
	c := *m
	c.Position, c.replayTo = 0, ""
	if slices.ContainsFunc(readHeaders, func(h string) bool { _, ok := m.Headers[h]; return ok }) {
		c.Headers = maps.Clone(m.Headers)
		for _, h := range readHeaders {
			delete(c.Headers, h)
		}
	}
	line, err := c.MarshalJSON()
	if err != nil { // a header value no export can hold: its Go form
		line = fmt.Appendf(nil, "%#v", c.Publishing)
	}
	sum := sha256.Sum256(line)
	return hex.EncodeToString(sum[:16]) // 128 bits: no producer can make two messages share one
}

// readHeaders are the headers a broker changes on a message each time it
// is read and handed back (a scan's reject with requeue, a closed
// channel): a quorum queue counts deliveries in x-delivery-count (and
// RabbitMQ 4's in x-acquired-count). A fingerprint that hashed them would
// change with every read, and an action confirmed after its dry run (which
// read every message once) would find none of the messages it counted.
// The redelivered flag is not a header; x-death changes only when the
// message is dead-lettered again, which makes it another message.
var readHeaders = []string{"x-delivery-count", "x-acquired-count"}

// hasEventID reports whether id is m's event id: its EventID, or the
// body's event_id when a message_id took EventID's place. A client may set
// a message_id of its own (a publish id) while the event's id, the one an
// operator searches logs and Plane for, is in the body.
func (m *Message) hasEventID(ids []string) bool {
	if slices.Contains(ids, m.EventID) {
		return true
	}
	// Decoded only here, for the few messages a search by id looks at
	// twice: when there is no message_id, EventID is the body's already.
	if m.MessageId == "" {
		return false
	}
	id, _ := dlq.BodyEvent(m.Body)
	return slices.Contains(ids, id)
}

// publishingOf copies a delivery's message, properties and all, so it can
// be published again.
func publishingOf(d *amqp.Delivery) amqp.Publishing {
	return amqp.Publishing{
		Headers:         d.Headers,
		ContentType:     d.ContentType,
		ContentEncoding: d.ContentEncoding,
		DeliveryMode:    d.DeliveryMode,
		Priority:        d.Priority,
		CorrelationId:   d.CorrelationId,
		ReplyTo:         d.ReplyTo,
		Expiration:      d.Expiration,
		MessageId:       d.MessageId,
		Timestamp:       d.Timestamp,
		Type:            d.Type,
		UserId:          d.UserId,
		AppId:           d.AppId,
		Body:            d.Body,
	}
}

// Origin is the queue the message's headers say it failed in: the origin
// queue its metadata records or, for a message RabbitMQ dead-lettered
// without warren's headers (rejected, over a length limit), the queue its
// latest x-death entry names. Empty when neither says.
//
// Headers are not proof: whoever published the message may have set them.
// A replay sends a message to the queue its dead-letter queue belongs to,
// whatever Origin says (see [Queue.Replay]), and an import refuses a
// message whose Origin names another queue unless told where to put it
// (see [Queue.Import]).
func (m *Message) Origin() string {
	if m.Metadata.OriginQueue != "" {
		return m.Metadata.OriginQueue
	}
	if len(m.Metadata.Deaths) > 0 {
		return m.Metadata.Deaths[0].Queue
	}
	return ""
}

// replayPublishing is the message a replay publishes: the same body and
// properties, with its failure record reset so the consumer treats it as a
// fresh delivery, and the replay counted. home is the queue the dead-letter
// queue belongs to, which the copy records as its origin queue whatever
// the headers said.
//
// RabbitMQ's death headers are removed by [dlq.StripDeaths], or the consumer's
// first retry of the copy could be dropped as a dead-letter cycle. The
// broker's first death in home is kept in warren's first-death headers.
// Headers that would come back over what a client reads on a connection
// of frameMax lose the producer's entries ([dlq.Fit]), as the consumer's
// copies do.
func replayPublishing(m *Message, home string, frameMax int) amqp.Publishing {
	p := m.Publishing
	h := dlq.StripDeaths(p.Headers, home)
	if h == nil {
		h = amqp.Table{}
	}
	for _, name := range []string{dlq.HeaderError, dlq.HeaderErrorClass, dlq.HeaderErrorContract, dlq.HeaderErrorField, dlq.HeaderAttempts, dlq.HeaderFirstFailure, dlq.HeaderLastFailure} {
		delete(h, name)
	}
	md := m.Metadata
	setIfMissing := func(name, value string) {
		if s, _ := h[name].(string); s == "" && value != "" {
			h[name] = value
		}
	}
	h[dlq.HeaderOriginQueue] = home
	setIfMissing(dlq.HeaderOriginExchange, md.OriginExchange)
	setIfMissing(dlq.HeaderOriginRoutingKey, md.OriginRoutingKey)
	h[dlq.HeaderReplays] = int32(min(max(md.Replays, 0), math.MaxInt32-1) + 1)
	p.Headers = dlq.Fit(h, frameMax)
	return p
}

// HeaderText shows a header value for a person, with its AMQP type where a
// plain rendering would hide it: bytes in hex, a timestamp in RFC 3339
// (UTC), a table or array as JSON. `warren dlq show` and the console both
// show headers through it.
func HeaderText(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case []byte:
		return fmt.Sprintf("bytes %x", x)
	case time.Time:
		return x.UTC().Format(time.RFC3339)
	case amqp.Table, []any:
		if b, err := json.Marshal(x); err == nil {
			return string(b)
		}
	}
	return fmt.Sprintf("%v (%T)", v, v)
}
