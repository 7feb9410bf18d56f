package outbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/contract"
	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/outbox"
)

// Publish must take a transaction and nothing that autocommits: the
// parameter is exactly pgx.Tx, and neither a pool nor a connection
// satisfies that interface, so passing one does not compile.
func TestPublishAcceptsOnlyATransaction(t *testing.T) {
	txType := reflect.TypeFor[pgx.Tx]()
	for name, fn := range map[string]any{
		"outbox.Publish":         outbox.Publish,
		"outbox.PublishBatch":    outbox.PublishBatch,
		"(*Outbox).Publish":      (*outbox.Table).Publish,
		"(*Outbox).PublishBatch": (*outbox.Table).PublishBatch,
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
		reflect.TypeFor[outbox.DB](),
	} {
		if notTx.Implements(txType) {
			t.Errorf("%v satisfies pgx.Tx, so Publish would accept it", notTx)
		}
	}
	var nilTx pgx.Tx
	if _, err := outbox.Publish(context.Background(), nilTx, event("x")); err == nil {
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
		"no event_id":     {Type: "a.b"},
		"no event_type":   {ID: "1"},
		"long event_id":   {ID: long, Type: "a.b"},
		"long event_type": {ID: "1", Type: long},
		// Carried as AMQP headers: a large one would pass frame_max.
		"long entity_id":      {ID: "1", Type: "a.b", EntityID: long},
		"long initiator_type": {ID: "1", Type: "a.b", InitiatorType: long},
		"NUL in entity_id":    {ID: "1", Type: "a.b", EntityID: "x\x00y"},
		"invalid UTF-8":       {ID: "1", Type: "a.b", WorkspaceID: "\xff"},
		"\\u0000 in data":     {ID: "1", Type: "a.b", Payload: warren.Payload{Data: json.RawMessage(`{"a":"\u0000"}`)}},
		"bad extra JSON":      {ID: "1", Type: "a.b", Extra: map[string]json.RawMessage{"k": json.RawMessage(`{`)}},
		"\\u0000 in extra":    {ID: "1", Type: "a.b", Extra: map[string]json.RawMessage{"k": json.RawMessage(`"\u0000"`)}},
		"bad payload extra":   {ID: "1", Type: "a.b", Payload: warren.Payload{Extra: map[string]json.RawMessage{"k": json.RawMessage(`nope`)}}},
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
		if err := outbox.StorableJSON("x", []byte(in)); (err == nil) != ok {
			t.Errorf("StorableJSON(%s) = %v, want ok=%v", in, err, ok)
		}
	}
}

// Publishing to a table that was never migrated is the first error a new
// user meets: it names the fix (migrate) and wraps ErrSchema, not only
// Postgres's SQLSTATE 42P01.
func TestPublishToAnUnmigratedTableSaysMigrate(t *testing.T) {
	t.Parallel()
	pool := testenv.PgPool(t)
	table := testenv.Name(t, "ob")
	testenv.DropTables(t, table)
	ob, err := outbox.New(table)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	_, err = ob.Publish(ctx, tx, event("first"))
	if !errors.Is(err, outbox.ErrSchema) || !strings.Contains(err.Error(), "warren outbox migrate") {
		t.Errorf("Publish to an unmigrated table: %v; want ErrSchema, naming warren outbox migrate", err)
	}
}

// With Options.Check (a contract set's), Publish refuses an event that
// breaks its contract before anything is written: the batch it came in
// writes nothing, the error names the contract and the field, and the
// producer's transaction stays usable.
func TestPublishRefusesAnEventThatBreaksItsContract(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	contracts, err := contract.NewSet(contract.MustOf[struct {
		Name string `json:"name"`
	}]("workitem.updated", "1.0"))
	if err != nil {
		t.Fatal(err)
	}
	ob, err := outbox.Open(e.table, outbox.Options{Check: contracts.Check})
	if err != nil {
		t.Fatal(err)
	}
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	good, bad := event("good"), event("bad")
	bad.Payload.Data = json.RawMessage(`{"name": 42}`)
	n, err := ob.PublishBatch(ctx, tx, []warren.Event{good, bad})
	var v *contract.Violation
	if n != 0 || !errors.As(err, &v) || v.Path != "payload.data.name" || !errors.Is(err, warren.ErrInvalidEvent) || !strings.Contains(err.Error(), `event 2 of 2 (event_id "bad")`) {
		t.Fatalf("a batch with an event that breaks its contract: %d written, %v", n, err)
	}
	unknown := event("unknown")
	unknown.Type = "workitem.archived"
	if _, err := ob.Publish(ctx, tx, unknown); !errors.Is(err, contract.ErrNoContract) {
		t.Fatalf("an event without a contract, under Check: %v", err)
	}
	if ok, err := ob.Publish(ctx, tx, good); err != nil || !ok {
		t.Fatalf("after the refusals: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got := e.count("true"); got != 1 {
		t.Fatalf("table holds %d rows, want the 1 valid event", got)
	}
}
