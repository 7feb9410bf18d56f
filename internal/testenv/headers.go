package testenv

import (
	"fmt"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
)

// UnreadableHeaders are header tables that RabbitMQ accepts and amqp091-go
// v1.16.0 refuses to read (read.go: maxFieldDepth, maxContainerElements).
// By name, with the words of the reason warren's connection gives for each
// (see dlq.HeaderUnreadable) and the entries it keeps. amqp091-go writes
// them without complaint.
func UnreadableHeaders() map[string]Unreadable {
	nested := amqp.Table{"leaf": "x"}
	for range 40 {
		nested = amqp.Table{"n": nested}
	}
	wide := make(amqp.Table, 9000)
	for i := range 9000 {
		wide[fmt.Sprintf("k%05d", i)] = int32(i)
	}
	return map[string]Unreadable{
		"nested-40-deep": {amqp.Table{"x-app": "kept", "deep": nested}, "nested deeper than 32 levels", amqp.Table{"x-app": "kept"}},
		"9000-entries":   {wide, "more than 8192 entries", nil},
	}
}

// ExpireUnreadable puts one message of each of [UnreadableHeaders] in the
// DLQ as the broker does when no consumer took them in time
// ([DeadLetterTopology.Expire]): a dead event of type workitem.created
// whose id is the name, with those headers. And one, "near-frame-max",
// whose headers a client reads as published, but that the broker's
// x-death grows past frame_max (128 KiB). It returns them by id.
func (top DeadLetterTopology) ExpireUnreadable(t testing.TB, conn *amqp.Connection) map[string]Unreadable {
	t.Helper()
	bad := UnreadableHeaders()
	bad["near-frame-max"] = Unreadable{amqp.Table{"big": strings.Repeat("x", 130800)}, "over the frame_max", nil}
	var msgs []amqp.Publishing
	for id, h := range bad {
		p := top.Message(Dead{ID: id, Type: "workitem.created"})
		p.Headers = h.Headers
		msgs = append(msgs, p)
	}
	top.Expire(t, conn, msgs)
	return bad
}

// Unreadable is one of [UnreadableHeaders].
type Unreadable struct {
	Headers amqp.Table
	Reason  string
	Kept    amqp.Table // the entries warren's connection keeps
}

// CCNearFrameMax is a CC header (an array of routing keys) that brings the
// content header of a message with the given message id and a 1 ms
// expiration ("1") to within slack bytes of frame_max (131,072: a payload
// of 131,064). When the broker dead-letters that message it copies every
// key into x-death's routing-keys: the content header it delivers is then
// more than twice frame_max.
func CCNearFrameMax(messageID string, slack int) []any {
	const payloadMax = 131072 - 8
	// class, weight, body size, flags; headers long string; expiration
	// "1" and the message id as short strings.
	fixed := 14 + 4 + 2 + 1 + len(messageID)
	arr := payloadMax - slack - fixed - (1 + 2 + 1 + 4) // "CC", 'A', its length
	var cc []any
	for arr > 0 {
		n := min(250, arr-5)
		if arr-5-n > 0 && arr-5-n < 6 { // leave room for a last element
			n -= 6
		}
		cc = append(cc, strings.Repeat("k", n))
		arr -= 5 + n
	}
	return cc
}
