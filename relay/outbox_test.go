package relay_test

// The outbox's operations seen end to end: what Redrive revives and what
// Publish stores reach the broker through a relay. The operations alone
// are tested in package outbox.

import (
	"context"
	"encoding/json"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/outbox"
)

func TestDeadAndRedrive(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.bindQueue()
	got := consume(t, e.queue)
	ctx := context.Background()
	var evs = []struct{ id, typ, entity string }{
		{"w1", "workitem.created", "e1"}, {"w2", "workitem.updated", "e2"}, {"w3", "workitem.deleted", "e3"},
		{"l1", "label.created", "e4"}, {"l2", "label.deleted", "e5"},
	}
	for _, x := range evs {
		ev := event(x.id)
		ev.Type, ev.EntityID = x.typ, x.entity
		e.publish(ev)
	}
	e.exec(`UPDATE {table} SET state = 'dead', finished_at = now(), attempts = 5, claims = 5, last_error = 'broker said no'`)

	check := func(f outbox.Filter, want ...string) {
		t.Helper()
		rows, err := e.outbox.Dead(ctx, e.pool, f)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, r := range rows {
			ids = append(ids, r.Event.ID)
			if r.State != outbox.Dead || r.LastError != "broker said no" || r.Attempts != 5 || r.FinishedAt.IsZero() {
				t.Errorf("dead row %+v", r)
			}
		}
		if !slices.Equal(ids, want) {
			t.Errorf("Dead(%+v) = %v, want %v", f, ids, want)
		}
	}
	check(outbox.Filter{}, "w1", "w2", "w3", "l1", "l2")
	check(outbox.Filter{EventTypePrefix: "workitem."}, "w1", "w2", "w3")
	check(outbox.Filter{EntityID: "e2"}, "w2")
	check(outbox.Filter{EventIDs: []string{"w3", "l2", "nope"}}, "w3", "l2")
	check(outbox.Filter{Limit: 2}, "w1", "w2")
	check(outbox.Filter{EventTypePrefix: "%"}) // a literal prefix, not a pattern
	check(outbox.Filter{EventTypePrefix: "workitem.", EntityID: "e4"})

	e.start(e.config(testenv.Name(t, "relay")))
	n, err := e.outbox.Redrive(ctx, e.pool, outbox.Filter{EventTypePrefix: "label."})
	if err != nil || n != 2 {
		t.Fatalf("Redrive: %d, %v; want 2", n, err)
	}
	got.waitDistinct(t, 2, 60*time.Second)
	if !got.has("l1") || !got.has("l2") {
		t.Fatalf("redriven rows did not arrive: %v", got.deliveries())
	}
	check(outbox.Filter{}, "w1", "w2", "w3")
}

// The event the consumer receives is the event the producer wrote:
// envelope, payload, unknown fields, and the AMQP properties routing
// relies on.
func TestRelayedEventKeepsEnvelopeAndUnknownFields(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.bindQueue()
	got := consume(t, e.queue)
	created := time.Date(2024, 5, 6, 7, 8, 9, 123456000, time.UTC)
	in := warren.Event{
		ID: "ev-1", Type: "workitem.created", EntityType: "issue", EntityID: "iss-1",
		WorkspaceID: "ws", ProjectID: "proj", InitiatorID: "user-1", InitiatorType: warren.InitiatorSystemImport,
		Payload: warren.Payload{
			Data:               json.RawMessage(`{"name":"n","n":1.5e300,"nested":{"z":1,"a":[true,null]}}`),
			PreviousAttributes: json.RawMessage(`{"name":"old"}`),
			Extra:              map[string]json.RawMessage{"changed_by": json.RawMessage(`"api"`)},
		},
		CreatedAt: created,
		Version:   "1.0",
		Extra:     map[string]json.RawMessage{"trace_id": json.RawMessage(`"abc"`), "shard": json.RawMessage(`7`)},
	}
	e.publish(in)
	// A row with no created_at and no optional fields.
	bare := warren.Event{ID: "ev-2", Type: "label.deleted"}
	e.publish(bare)
	e.start(e.config(testenv.Name(t, "relay")))
	got.waitDistinct(t, 2, 60*time.Second)

	for _, d := range got.deliveries() {
		out, err := warren.DecodeEvent(d.Body)
		if err != nil {
			t.Fatalf("body does not decode: %v\n%s", err, d.Body)
		}
		if d.MessageId != out.ID || d.Type != out.Type || d.DeliveryMode != 2 || d.ContentType != "application/json" {
			t.Errorf("properties message_id=%q type=%q mode=%d content_type=%q do not match event %s", d.MessageId, d.Type, d.DeliveryMode, d.ContentType, out.ID)
		}
		if d.RoutingKey != out.Type {
			t.Errorf("routing key %q, want the event type %q", d.RoutingKey, out.Type)
		}
		if d.Headers[warren.HeaderInitiatorType] != out.InitiatorType {
			t.Errorf("initiator header %v, want %q", d.Headers[warren.HeaderInitiatorType], out.InitiatorType)
		}
		if d.Headers[warren.HeaderEntityID] != out.EntityID {
			t.Errorf("entity id header %v, want %q", d.Headers[warren.HeaderEntityID], out.EntityID)
		}
		switch out.ID {
		case "ev-1":
			if !d.Timestamp.Equal(created.Truncate(time.Second)) { // AMQP timestamps are whole seconds
				t.Errorf("timestamp %v, want %v", d.Timestamp, created)
			}
			requireSameEvent(t, in, out)
		case "ev-2":
			if out.CreatedAt.IsZero() || time.Since(out.CreatedAt) > time.Minute {
				t.Errorf("an event without created_at gets the insert time, got %v", out.CreatedAt)
			}
			out.CreatedAt = time.Time{}
			requireSameEvent(t, bare, out)
		}
	}
}

// requireSameEvent compares two events by their JSON encodings (JSON
// values compared semantically, since jsonb does not keep key order).
func requireSameEvent(t *testing.T, want, got warren.Event) {
	t.Helper()
	norm := func(ev warren.Event) any {
		b, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		var v any
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	if w, g := norm(want), norm(got); !reflect.DeepEqual(w, g) {
		t.Errorf("event changed on the way:\nwant %v\ngot  %v", w, g)
	}
}
