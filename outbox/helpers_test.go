package outbox_test

import (
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/outbox"
)

// env is one test's outbox table, unique to the test and dropped when it
// ends.
type env struct {
	t      *testing.T
	ob     *testenv.OutboxTable
	pool   *pgxpool.Pool
	outbox *outbox.Table
	table  string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	ob := testenv.NewOutboxTable(t)
	return &env{t: t, ob: ob, pool: ob.Pool, outbox: ob.Table, table: ob.Table.Name()}
}

// publishN writes n events with ids prefix-0 … prefix-(n-1).
func (e *env) publishN(prefix string, n int) []string {
	e.t.Helper()
	return e.ob.PublishN(prefix, n)
}

var event = testenv.OutboxEvent

// count returns how many rows of the test's table match where.
func (e *env) count(where string, args ...any) int {
	e.t.Helper()
	return e.ob.Count(where, args...)
}

// exec runs sql with {table} replaced by the test's table.
func (e *env) exec(sql string, args ...any) {
	e.t.Helper()
	e.ob.Exec(sql, args...)
}
