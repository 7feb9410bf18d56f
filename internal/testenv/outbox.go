package testenv

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/outbox"
)

// OutboxTable is a test's own outbox table, migrated when made and dropped
// with its migrations record when the test ends: what the outbox's and
// the relay's tests write to.
type OutboxTable struct {
	t     testing.TB
	Pool  *pgxpool.Pool
	Table *outbox.Table
}

// NewOutboxTable makes and migrates an outbox table named for t.
func NewOutboxTable(t testing.TB) *OutboxTable {
	t.Helper()
	name := Name(t, "ob")
	DropTables(t, name, name+"_migrations")
	return newOutboxTable(t, PgPool(t), name)
}

// NewOutboxTableOn makes and migrates an outbox table named for t in the
// database of pool (a private server's, which goes with the test).
func NewOutboxTableOn(t testing.TB, pool *pgxpool.Pool) *OutboxTable {
	t.Helper()
	return newOutboxTable(t, pool, Name(t, "ob"))
}

func newOutboxTable(t testing.TB, pool *pgxpool.Pool, name string) *OutboxTable {
	t.Helper()
	ob, err := outbox.New(name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ob.Migrate(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
	return &OutboxTable{t: t, Pool: pool, Table: ob}
}

// Publish writes evs in one committed transaction.
func (o *OutboxTable) Publish(evs ...warren.Event) {
	o.t.Helper()
	ctx := context.Background()
	tx, err := o.Pool.Begin(ctx)
	if err != nil {
		o.t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := o.Table.PublishBatch(ctx, tx, evs); err != nil {
		o.t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		o.t.Fatal(err)
	}
}

// PublishN writes n events made by [OutboxEvent], with ids prefix-0 …
// prefix-(n-1), in transactions of 1000, and returns their ids.
func (o *OutboxTable) PublishN(prefix string, n int) []string {
	o.t.Helper()
	ids := make([]string, 0, n)
	for start := 0; start < n; start += 1000 {
		var batch []warren.Event
		for i := start; i < min(n, start+1000); i++ {
			ev := OutboxEvent(fmt.Sprintf("%s-%d", prefix, i))
			batch = append(batch, ev)
			ids = append(ids, ev.ID)
		}
		o.Publish(batch...)
	}
	return ids
}

// Count returns how many rows of the table match the SQL condition where.
func (o *OutboxTable) Count(where string, args ...any) int {
	o.t.Helper()
	var n int
	q := "SELECT count(*) FROM " + pgx.Identifier{o.Table.Name()}.Sanitize() + " WHERE " + where
	if err := o.Pool.QueryRow(context.Background(), q, args...).Scan(&n); err != nil {
		o.t.Fatal(err)
	}
	return n
}

// Exec runs sql with {table} replaced by the quoted table name.
func (o *OutboxTable) Exec(sql string, args ...any) {
	o.t.Helper()
	sql = strings.ReplaceAll(sql, "{table}", pgx.Identifier{o.Table.Name()}.Sanitize())
	if _, err := o.Pool.Exec(context.Background(), sql, args...); err != nil {
		o.t.Fatal(err)
	}
}

// OutboxEvent is a valid event with the given id, of type
// "workitem.updated" on entity "entity-<id>".
func OutboxEvent(id string) warren.Event {
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
