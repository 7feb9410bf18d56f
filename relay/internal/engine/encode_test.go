package engine_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/cloudevents"
	"github.com/warrenmq/warren/internal/amqpx"
	"github.com/warrenmq/warren/outbox"
	"github.com/warrenmq/warren/relay/internal/engine"
)

func row() outbox.Row {
	return outbox.Row{ID: 7, Event: warren.Event{
		ID: "9b2f1c9e-2a44-4a8e-9d64-5b7d3c1e0a11", Type: "workitem.created", Version: "1.0",
		EntityType: "issue", EntityID: "1", WorkspaceID: "w",
		CreatedAt: time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC), Payload: warren.Payload{Data: []byte(`{"id":1}`)},
	}}
}

// Every row both relays would make dead at once is refused here, with the
// reason a dead row records, in warren's envelope and as a CloudEvent in
// either mode; a good row comes back without trace headers, which each
// relay adds its own way, and reads back as its event.
func TestEncode(t *testing.T) {
	for name, enc := range map[string]engine.Encoding{
		"envelope":               {},
		"cloudevents binary":     {CloudEvents: &cloudevents.Encoder{Source: "/orders"}},
		"cloudevents structured": {CloudEvents: &cloudevents.Encoder{Source: "/orders", Mode: cloudevents.Structured}},
	} {
		t.Run(name, func(t *testing.T) {
			msg, err := engine.Encode(enc, row(), 1<<20)
			if err != nil {
				t.Fatalf("a valid row: %v", err)
			}
			var got warren.Event
			if enc.CloudEvents != nil {
				ce, err := cloudevents.Decode(msg.ContentType, msg.Headers, msg.Body)
				if err != nil {
					t.Fatal(err)
				}
				got = ce.Event
			} else if got, err = warren.DecodeEvent(msg.Body); err != nil {
				t.Fatal(err)
			}
			if want := row().Event; got.ID != want.ID || got.Type != want.Type || string(got.Payload.Data) != string(want.Payload.Data) {
				t.Errorf("the message reads back as %+v, want %+v", got, want)
			}
			if msg.MessageId != row().Event.ID || msg.Headers[warren.HeaderEntityID] != "1" {
				t.Errorf("message_id %q, headers %v: want the event's id and entity", msg.MessageId, msg.Headers)
			}
			if _, ok := msg.Headers["traceparent"]; ok {
				t.Fatalf("headers %v carry a trace context; the caller adds it", msg.Headers)
			}

			undecodable := row()
			undecodable.DecodeErr = errors.New("column payload is not a JSON object")
			if _, err := engine.Encode(enc, undecodable, 1<<20); err == nil || !strings.Contains(err.Error(), "payload") {
				t.Errorf("a row that did not decode: %v, want its decode error", err)
			}

			if _, err := engine.Encode(enc, row(), 10); err == nil || !strings.Contains(err.Error(), "more than MaxMessageBytes (10)") {
				t.Errorf("a body over the bound: %v", err)
			}

			traced := row()
			traced.TraceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
			traced.TraceState = "k=" + strings.Repeat("v", amqpx.MaxContentHeader)
			if _, err := engine.Encode(enc, traced, 1<<20); err == nil || !strings.Contains(err.Error(), "with its trace context") {
				t.Errorf("a trace context over the header frame: %v", err)
			}
			traced.TraceState = "k=v"
			if _, err := engine.Encode(enc, traced, 1<<20); err != nil {
				t.Errorf("a short trace context: %v", err)
			}
		})
	}
}
