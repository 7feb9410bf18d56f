package cdc

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/warrenmq/warren/internal/testenv"
)

// TestSettleStatementsProbeThePrimaryKey checks the plans of the trim, the
// dead mark, the refetch and the backfill's page where they went wrong
// before: a generic plan (pgx prepares every statement, and Postgres plans
// generically after five runs) on a table whose statistics were taken
// while it was empty and which now holds a backlog, as an outbox trimmed
// behind the stream mostly is when autovacuum last looks. Each must find
// its rows through the primary key; a scan of the pending rows that
// searched the id array for each of them made a trim of 1,250 ids take up
// to 650 ms, and a backfill page read every pending row after the cursor.
func TestSettleStatementsProbeThePrimaryKey(t *testing.T) {
	t.Parallel()
	ob := testenv.NewOutboxTable(t)
	table := ob.Table.Name()
	quoted := pgx.Identifier{table}.Sanitize()
	testenv.StaleStatistics(t, ob.Pool, table)
	ob.PublishN("plan", 5000)
	var ids []int64
	if err := ob.Pool.QueryRow(context.Background(), `SELECT array_agg(id) FROM (SELECT id FROM `+quoted+` ORDER BY id LIMIT 1000) AS s`).Scan(&ids); err != nil {
		t.Fatal(err)
	}
	attempts, reasons := make([]int32, len(ids)), make([]string, len(ids))
	for _, c := range []struct {
		name, setup, sql string
		args             []any
	}{
		{"trim", "", trimSQL(quoted), []any{ids}},
		{"dead mark", "", markDeadSQL(quoted), []any{ids, attempts, reasons}},
		{"refetch", "", pendingRowsSQL(quoted), []any{ids}},
		{"backfill page", backfillPlanSQL, backfillPageSQL(quoted), []any{ids[0], ids[len(ids)-1], 500}},
	} {
		scans, indexes, plan := testenv.GenericPlan(t, ob.Pool, table, c.setup, c.sql, c.args...)
		if len(scans) == 0 || len(indexes) != 1 || indexes[0] != table+"_pkey" {
			t.Errorf("%s: the outbox table is read by %v through the indexes %v, want only %s_pkey; plan:\n%s", c.name, scans, indexes, table, plan)
		}
	}
}
