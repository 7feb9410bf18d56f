package interop

import (
	"bytes"
	"context"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	cesdk "github.com/cloudevents/sdk-go/v2"
	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/binding/spec"
	"github.com/cloudevents/sdk-go/v2/event"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/cloudevents"
	"github.com/warrenmq/warren/internal/testenv"
)

// through publishes p to a queue of its own on the real broker, with
// publisher confirms, and returns the delivery a consumer gets.
func through(t *testing.T, p amqp.Publishing) amqp.Delivery {
	t.Helper()
	ch := testenv.Channel(t)
	queue := testenv.Name(t, "q")
	if _, err := ch.QueueDeclare(queue, false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	testenv.CleanupQueues(t, queue)
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conf, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, true, false, p)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := conf.WaitContext(ctx); !ok || err != nil {
		t.Fatalf("publish not confirmed: %v", err)
	}
	deliveries, err := ch.ConsumeWithContext(ctx, queue, "", true, true, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case d, ok := <-deliveries:
		if !ok {
			t.Fatal("the channel closed before the delivery")
		}
		return d
	case <-ctx.Done():
		t.Fatal("no delivery within 30s")
	}
	return amqp.Delivery{}
}

// publishing is the message the relay sends for an encoded event: the
// codec's content type, headers and body, with the relay's properties.
func publishing(ev warren.Event, m cloudevents.Message) amqp.Publishing {
	return amqp.Publishing{ContentType: m.ContentType, Headers: m.Headers, Body: m.Body,
		MessageId: ev.ID, Type: ev.Type, DeliveryMode: amqp.Persistent, Timestamp: ev.CreatedAt}
}

// planeEvent is an event as a consumer decodes it from Plane's envelope:
// Plane's quirks (an empty project_id, previous_attributes the string
// "{}") and Plane's publisher fields in Extra.
func planeEvent(t *testing.T) warren.Event {
	t.Helper()
	enc := warren.Encoder{Format: warren.FormatPlane, Publisher: warren.PublisherInfo{Name: "plane-event-stream", Instance: "api-1", Source: "outbox-poller"}}
	body, err := enc.Encode(warren.Event{
		ID: "9b2f1c9e-2a44-4a8e-9d64-5b7d3c1e0a11", Type: "workitem.created", EntityType: "issue", EntityID: "6f1e-issue",
		WorkspaceID: "ws-1", InitiatorID: "u-1", InitiatorType: warren.InitiatorUser, Version: "1.0",
		CreatedAt: time.Date(2026, 12, 7, 10, 11, 12, 0, time.UTC),
		Payload:   warren.Payload{Data: json.RawMessage(`{"id":"6f1e-issue","name":"Fix <it> & ship é"}`), PreviousAttributes: json.RawMessage(`"{}"`)},
	}, 42)
	if err != nil {
		t.Fatal(err)
	}
	ev, err := warren.DecodeEvent(body)
	if err != nil {
		t.Fatal(err)
	}
	ev.CreatedAt = ev.CreatedAt.Add(123456789) // nanoseconds, which the time attribute keeps
	return ev
}

func jsonEqual(t *testing.T, what string, got, want []byte) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("%s: %v: %s", what, err, got)
	}
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("%s = %s, want %s", what, got, want)
	}
}

// warren writes an event, the broker carries it, the SDK reads it (binary
// mode through the adapter's MessageMetadataReader, structured through
// the SDK's JSON format) and sees every attribute, extension and the
// data; then the SDK writes it back in the same mode, and warren reads
// the very event it started with.
func TestWarrenToSDK(t *testing.T) {
	ev := planeEvent(t)
	for _, c := range []struct {
		name string
		enc  cloudevents.Encoder
		want binding.Encoding
	}{
		{"binary", cloudevents.Encoder{Source: "/plane-event-stream/outbox-poller"}, binding.EncodingBinary},
		{"binary underscore", cloudevents.Encoder{Source: "/plane-event-stream/outbox-poller", Prefix: cloudevents.PrefixUnderscore}, binding.EncodingBinary},
		{"structured", cloudevents.Encoder{Source: "/plane-event-stream/outbox-poller", Mode: cloudevents.Structured}, binding.EncodingStructured},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			m, err := c.enc.Encode(ev)
			if err != nil {
				t.Fatal(err)
			}
			d := through(t, publishing(ev, m))
			msg := newDeliveryMessage(d)
			if enc := msg.ReadEncoding(); enc != c.want {
				t.Fatalf("the SDK reads the delivery as %v, want %v", enc, c.want)
			}
			e, err := binding.ToEvent(context.Background(), msg)
			if err != nil {
				t.Fatalf("the SDK cannot read the delivery: %v", err)
			}
			if err := e.Validate(); err != nil {
				t.Fatalf("the SDK finds the event invalid: %v", err)
			}
			for _, a := range []struct{ name, got, want string }{
				{"specversion", e.SpecVersion(), "1.0"},
				{"id", e.ID(), ev.ID},
				{"source", e.Source(), c.enc.Source},
				{"type", e.Type(), ev.Type},
				{"subject", e.Subject(), ev.EntityID},
				{"datacontenttype", e.DataContentType(), "application/json"},
				{"dataschema", e.DataSchema(), ""},
			} {
				if a.got != a.want {
					t.Errorf("%s = %q, want %q", a.name, a.got, a.want)
				}
			}
			if !e.Time().Equal(ev.CreatedAt) {
				t.Errorf("time = %v, want %v (to the nanosecond)", e.Time(), ev.CreatedAt)
			}
			// Plane's project_id null is warren's "", which no attribute
			// carries; publisher_instance and outbox_id are no legal
			// attribute names, and source is the core attribute's.
			wantExt := map[string]any{
				"entitytype": "issue", "workspaceid": "ws-1", "initiatorid": "u-1", "initiatortype": "USER", "version": "1.0",
				"publisher": "plane-event-stream", "timestamp": int32(ev.CreatedAt.Unix()),
				"warrenextra": `{"outbox_id":42,"publisher_instance":"api-1","source":"outbox-poller"}`,
			}
			if got := e.Extensions(); !reflect.DeepEqual(got, wantExt) {
				t.Errorf("extensions\n got %#v\nwant %#v", got, wantExt)
			}
			jsonEqual(t, "data", e.Data(), []byte(`{"data":{"id":"6f1e-issue","name":"Fix <it> & ship é"},"previous_attributes":"{}"}`))
			if c.want == binding.EncodingBinary {
				// The metadata reader, attribute by attribute, as an SDK
				// transformer or router reads a binary message.
				if attr, v := msg.GetAttribute(spec.ID); attr == nil || v != ev.ID {
					t.Errorf("GetAttribute(ID) = %v, %v", attr, v)
				}
				if attr, v := msg.GetAttribute(spec.DataContentType); attr == nil || v != "application/json" {
					t.Errorf("GetAttribute(DataContentType) = %v, %v", attr, v)
				}
				if v := msg.GetExtension("entitytype"); v != "issue" {
					t.Errorf("GetExtension(entitytype) = %v", v)
				}
			}

			// And back: the SDK writes the event it read, in the same mode.
			var p amqp.Publishing
			w := &publishingWriter{p: &p, prefix: c.enc.Prefix}
			if w.prefix == "" {
				w.prefix = cloudevents.PrefixColon
			}
			ctx := binding.WithForceBinary(context.Background())
			if c.want == binding.EncodingStructured {
				ctx = binding.WithForceStructured(context.Background())
			}
			if enc, err := binding.Write(ctx, binding.ToMessage(e), w, w); err != nil || enc != c.want {
				t.Fatalf("the SDK writes %v, %v; want %v", enc, err, c.want)
			}
			d = through(t, p)
			back, err := cloudevents.Decode(d.ContentType, d.Headers, d.Body)
			if err != nil {
				t.Fatalf("warren cannot read what the SDK wrote back: %v\nheaders %v\nbody %s", err, d.Headers, d.Body)
			}
			// The SDK's JSON format writes data again with encoding/json,
			// which escapes <, > and &: the payload comes back equal as
			// JSON, and byte for byte in binary mode, where the data is
			// the body as it is.
			jsonEqual(t, "payload.data", back.Event.Payload.Data, ev.Payload.Data)
			if c.want == binding.EncodingBinary && !bytes.Equal(back.Event.Payload.Data, ev.Payload.Data) {
				t.Errorf("binary mode: payload.data %s, want %s byte for byte", back.Event.Payload.Data, ev.Payload.Data)
			}
			rest := back.Event
			rest.Payload.Data = ev.Payload.Data
			if !reflect.DeepEqual(rest, ev) || back.Source != c.enc.Source {
				t.Errorf("warren → SDK → warren changed the event:\n got %#v\nwant %#v", back.Event, ev)
			}
		})
	}
}

// The SDK writes an event of its own making into an amqp091 Publishing
// through the binding's writers (binary, with either prefix and with the
// time in either of the binding's forms, and structured), the broker
// carries it, and warren reads every attribute, extension and the data.
func TestSDKToWarren(t *testing.T) {
	created := time.Date(2026, 12, 7, 10, 11, 12, 987654321, time.UTC)
	e := cesdk.NewEvent()
	e.SetID("sdk-1")
	e.SetSource("https://example.com/issues")
	e.SetType("workitem.updated")
	e.SetSubject("issue-9")
	e.SetTime(created)
	e.SetDataSchema("https://example.com/schemas/workitem.json")
	for k, v := range map[string]any{
		"entitytype": "issue", "workspaceid": "ws-2", "projectid": "p-2", "initiatortype": "SYSTEM.AUTOMATION", "version": "2",
		"tenant": "acme", "retries": 3, "urgent": true,
	} {
		e.SetExtension(k, v)
	}
	payload := map[string]any{"data": map[string]any{"id": "issue-9", "state": "done"}, "previous_attributes": map[string]any{"state": "todo"}}
	if err := e.SetData(event.ApplicationJSON, payload); err != nil {
		t.Fatal(err)
	}
	if err := e.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name       string
		structured bool
		prefix     string
		nativeTime bool
	}{
		{name: "binary", prefix: cloudevents.PrefixColon},
		{name: "binary underscore", prefix: cloudevents.PrefixUnderscore},
		{name: "binary with an AMQP timestamp", prefix: cloudevents.PrefixColon, nativeTime: true},
		{name: "structured", structured: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var p amqp.Publishing
			w := &publishingWriter{p: &p, prefix: c.prefix, nativeTime: c.nativeTime}
			ctx, want := binding.WithForceBinary(context.Background()), binding.EncodingBinary
			if c.structured {
				ctx, want = binding.WithForceStructured(context.Background()), binding.EncodingStructured
			}
			if enc, err := binding.Write(ctx, binding.ToMessage(&e), w, w); err != nil || enc != want {
				t.Fatalf("the SDK writes %v, %v; want %v", enc, err, want)
			}
			d := through(t, p)
			got, err := cloudevents.Decode(d.ContentType, d.Headers, d.Body)
			if err != nil {
				t.Fatalf("warren cannot read the SDK's event: %v\ncontent type %s\nheaders %v\nbody %s", err, d.ContentType, d.Headers, d.Body)
			}
			wantTime := created
			if c.nativeTime {
				wantTime = created.Truncate(time.Second) // an AMQP 0-9-1 timestamp holds whole seconds
			}
			ev := got.Event
			wantEv := warren.Event{
				ID: "sdk-1", Type: "workitem.updated", EntityType: "issue", EntityID: "issue-9", WorkspaceID: "ws-2", ProjectID: "p-2",
				InitiatorType: "SYSTEM.AUTOMATION", Version: "2", CreatedAt: wantTime,
				Payload: ev.Payload, // compared as JSON below
				Extra:   map[string]json.RawMessage{"tenant": json.RawMessage(`"acme"`), "retries": json.RawMessage(`3`), "urgent": json.RawMessage(`true`)},
			}
			if !reflect.DeepEqual(ev, wantEv) {
				t.Errorf("got  %#v\nwant %#v", ev, wantEv)
			}
			if got.Source != "https://example.com/issues" || got.DataSchema != "https://example.com/schemas/workitem.json" {
				t.Errorf("source %q, dataschema %q", got.Source, got.DataSchema)
			}
			if wantMode := map[bool]cloudevents.Mode{false: cloudevents.Binary, true: cloudevents.Structured}[c.structured]; got.Mode != wantMode {
				t.Errorf("mode %v, want %v", got.Mode, wantMode)
			}
			jsonEqual(t, "payload.data", ev.Payload.Data, []byte(`{"id":"issue-9","state":"done"}`))
			jsonEqual(t, "payload.previous_attributes", ev.Payload.PreviousAttributes, []byte(`{"state":"todo"}`))
			var item struct{ State string }
			if err := ev.Payload.DecodeData(&item); err != nil || item.State != "done" {
				t.Errorf("DecodeData: %+v, %v", item, err)
			}
			if !bytes.Contains([]byte(d.ContentType), []byte("json")) {
				t.Errorf("content type %q", d.ContentType)
			}
		})
	}
}
