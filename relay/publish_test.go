package relay_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/relay"
)

// Publish must take a transaction and nothing that autocommits: the
// parameter is exactly pgx.Tx, and neither a pool nor a connection
// satisfies that interface, so passing one does not compile.
func TestPublishAcceptsOnlyATransaction(t *testing.T) {
	txType := reflect.TypeFor[pgx.Tx]()
	for name, fn := range map[string]any{
		"relay.Publish":          relay.Publish,
		"relay.PublishBatch":     relay.PublishBatch,
		"(*Outbox).Publish":      (*relay.Outbox).Publish,
		"(*Outbox).PublishBatch": (*relay.Outbox).PublishBatch,
	} {
		ft := reflect.TypeOf(fn)
		found := false
		for i := range ft.NumIn() {
			if ft.In(i) == txType {
				found = true
			}
		}
		if !found {
			t.Errorf("%s does not take a pgx.Tx: %v", name, ft)
		}
	}
	for _, notTx := range []reflect.Type{
		reflect.TypeFor[*pgxpool.Pool](),
		reflect.TypeFor[*pgxpool.Conn](),
		reflect.TypeFor[*pgx.Conn](),
		reflect.TypeFor[relay.DB](),
	} {
		if notTx.Implements(txType) {
			t.Errorf("%v satisfies pgx.Tx, so Publish would accept it", notTx)
		}
	}
	var nilTx pgx.Tx
	if _, err := relay.Publish(context.Background(), nilTx, event("x")); err == nil {
		t.Error("Publish accepted a nil transaction")
	}
}

func TestPublishDeduplicatesOnEventID(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if ok, err := e.outbox.Publish(ctx, tx, event("a")); err != nil || !ok {
		t.Fatalf("first publish: inserted=%v err=%v", ok, err)
	}
	if ok, err := e.outbox.Publish(ctx, tx, event("a")); err != nil || ok {
		t.Fatalf("second publish of the same event_id: inserted=%v err=%v, want false, nil", ok, err)
	}
	n, err := e.outbox.PublishBatch(ctx, tx, []warren.Event{event("a"), event("b"), event("c"), event("b")})
	if err != nil || n != 2 {
		t.Fatalf("batch with one stored and one repeated id: inserted %d, err %v; want 2", n, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got := e.count("true"); got != 3 {
		t.Fatalf("table holds %d rows, want 3", got)
	}
}

// Invalid events are refused before they reach the transaction, which
// therefore stays usable.
func TestPublishRefusesUnstorableEvents(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	long := strings.Repeat("x", 256)
	cases := map[string]warren.Event{
		"no event_id":       {Type: "a.b"},
		"no event_type":     {ID: "1"},
		"long event_id":     {ID: long, Type: "a.b"},
		"long event_type":   {ID: "1", Type: long},
		"NUL in entity_id":  {ID: "1", Type: "a.b", EntityID: "x\x00y"},
		"invalid UTF-8":     {ID: "1", Type: "a.b", WorkspaceID: "\xff"},
		"\\u0000 in data":   {ID: "1", Type: "a.b", Payload: warren.Payload{Data: json.RawMessage(`{"a":"\u0000"}`)}},
		"bad extra JSON":    {ID: "1", Type: "a.b", Extra: map[string]json.RawMessage{"k": json.RawMessage(`{`)}},
		"\\u0000 in extra":  {ID: "1", Type: "a.b", Extra: map[string]json.RawMessage{"k": json.RawMessage(`"\u0000"`)}},
		"bad payload extra": {ID: "1", Type: "a.b", Payload: warren.Payload{Extra: map[string]json.RawMessage{"k": json.RawMessage(`nope`)}}},
	}
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	for name, ev := range cases {
		_, err := e.outbox.Publish(ctx, tx, ev)
		if !errors.Is(err, warren.ErrInvalidEvent) {
			t.Errorf("%s: got %v, want an error wrapping warren.ErrInvalidEvent", name, err)
		}
	}
	// An escaped backslash followed by u0000 is ordinary text.
	ok := event("escaped")
	ok.Payload.Data = json.RawMessage(`{"a":"\\u0000"}`)
	if _, err := e.outbox.Publish(ctx, tx, ok); err != nil {
		t.Fatalf("after refusals the transaction must still work: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if n := e.count("true"); n != 1 {
		t.Fatalf("table holds %d rows, want 1", n)
	}
}

func TestStorableJSON(t *testing.T) {
	for in, ok := range map[string]bool{
		`"\u0000"`:    false,
		`"a\u0000b"`:  false,
		`"\\u0000"`:   true,
		`"\\\u0000"`:  false,
		`"\u00001"`:   false,
		`"\u0001"`:    true,
		`{"k":"v"}`:   true,
		`"\\\\u0000"`: true,
		`"\u000"`:     true, // not valid JSON, but not the escape either
	} {
		if err := relay.StorableJSON("x", []byte(in)); (err == nil) != ok {
			t.Errorf("StorableJSON(%s) = %v, want ok=%v", in, err, ok)
		}
	}
}

// The event the consumer receives is the event the producer wrote:
// envelope, payload, unknown fields, and the AMQP properties routing
// relies on.
func TestRelayedEventKeepsEnvelopeAndUnknownFields(t *testing.T) {
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
