package outbox_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/outbox"
)

// env is one test's outbox table, unique to the test and dropped when it
// ends.
type env struct {
	t      *testing.T
	pool   *pgxpool.Pool
	outbox *outbox.Table
	table  string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	table := testenv.Name(t, "ob")
	testenv.DropTables(t, table, table+"_migrations")
	pool := testenv.PgPool(t)
	ob, err := outbox.New(table)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ob.Migrate(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
	return &env{t: t, pool: pool, outbox: ob, table: table}
}

// publish writes evs in one committed transaction.
func (e *env) publish(evs ...warren.Event) {
	e.t.Helper()
	ctx := context.Background()
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := e.outbox.PublishBatch(ctx, tx, evs); err != nil {
		e.t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		e.t.Fatal(err)
	}
}

// publishN writes n events with ids prefix-0 … prefix-(n-1).
func (e *env) publishN(prefix string, n int) []string {
	e.t.Helper()
	var batch []warren.Event
	ids := make([]string, 0, n)
	for i := range n {
		ev := event(fmt.Sprintf("%s-%d", prefix, i))
		batch = append(batch, ev)
		ids = append(ids, ev.ID)
	}
	e.publish(batch...)
	return ids
}

func event(id string) warren.Event {
	return warren.Event{
		ID:            id,
		Type:          "workitem.updated",
		EntityType:    "issue",
		EntityID:      "entity-" + id,
		WorkspaceID:   "ws-1",
		InitiatorType: warren.InitiatorUser,
		Payload:       warren.Payload{Data: json.RawMessage(`{"name":"x"}`)},
		Version:       "1.0",
	}
}

// count returns how many rows of the table match where.
func (e *env) count(where string, args ...any) int {
	e.t.Helper()
	var n int
	q := fmt.Sprintf("SELECT count(*) FROM %q WHERE %s", e.table, where)
	if err := e.pool.QueryRow(context.Background(), q, args...).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n
}

// exec runs sql with {table} replaced by the test's table.
func (e *env) exec(sql string, args ...any) {
	e.t.Helper()
	if _, err := e.pool.Exec(context.Background(), strings.ReplaceAll(sql, "{table}", fmt.Sprintf("%q", e.table)), args...); err != nil {
		e.t.Fatal(err)
	}
}
