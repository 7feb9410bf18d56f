package cdc

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/warrenmq/warren/internal/testenv"
)

// TestSettleStatementsProbeThePrimaryKey checks the plans of the trim, the
// dead mark and the refetch where they went wrong before: a generic plan
// (pgx prepares every statement, and Postgres plans generically after five
// runs) on a table whose statistics were taken while it was empty and which
// now holds a backlog, as an outbox trimmed behind the stream mostly is
// when autovacuum last looks. Each must find its rows through the primary
// key, one probe per id; a scan of the pending rows that searches the id
// array for each of them made a trim of 1,250 ids take up to 650 ms.
func TestSettleStatementsProbeThePrimaryKey(t *testing.T) {
	ob := testenv.NewOutboxTable(t)
	table := ob.Table.Name()
	quoted := pgx.Identifier{table}.Sanitize()
	ctx := context.Background()
	for _, sql := range []string{
		`ALTER TABLE ` + quoted + ` SET (autovacuum_enabled = false)`,
		`ANALYZE ` + quoted,
	} {
		if _, err := ob.Pool.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	ob.PublishN("plan", 5000)
	var ids []int64
	if err := ob.Pool.QueryRow(ctx, `SELECT array_agg(id) FROM (SELECT id FROM `+quoted+` ORDER BY id LIMIT 1000) AS s`).Scan(&ids); err != nil {
		t.Fatal(err)
	}
	attempts, reasons := make([]int32, len(ids)), make([]string, len(ids))

	conn, err := ob.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SET plan_cache_mode = force_generic_plan`); err != nil {
		t.Fatal(err)
	}
	defer conn.Exec(ctx, `RESET plan_cache_mode`)
	for _, c := range []struct {
		name string
		sql  string
		args []any
	}{
		{"trim", trimSQL(quoted), []any{ids}},
		{"dead mark", markDeadSQL(quoted), []any{ids, attempts, reasons}},
		{"refetch", pendingRowsSQL(quoted), []any{ids}},
	} {
		if _, err := conn.Exec(ctx, `PREPARE plan_test AS `+c.sql); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		// EXPLAIN without ANALYZE runs nothing: the rows stay. The simple
		// protocol writes the arguments into the text, where EXECUTE's
		// parameters must be.
		var plan []byte
		args := append([]any{pgx.QueryExecModeSimpleProtocol}, c.args...)
		err := conn.QueryRow(ctx, `EXPLAIN (FORMAT JSON) EXECUTE plan_test(`+placeholders(len(c.args))+`)`, args...).Scan(&plan)
		if _, derr := conn.Exec(ctx, `DEALLOCATE plan_test`); err == nil {
			err = derr
		}
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		scans, indexes := tableReads(t, plan, table)
		if len(scans) == 0 || len(indexes) != 1 || indexes[0] != table+"_pkey" {
			t.Errorf("%s: the outbox table is read by %v through the indexes %v, want only %s_pkey; plan:\n%s", c.name, scans, indexes, table, plan)
		}
	}
}

func placeholders(n int) string {
	s := ""
	for i := range n {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("$%d", i+1)
	}
	return s
}

// planNode is what TestSettleStatementsProbeThePrimaryKey reads of a node
// of EXPLAIN's JSON.
type planNode struct {
	Type     string     `json:"Node Type"`
	Relation string     `json:"Relation Name"`
	Index    string     `json:"Index Name"`
	Plans    []planNode `json:"Plans"`
}

// tableReads returns the kinds of the nodes of plan that read table, and
// the indexes the plan reads (a bitmap index scan names no table: its
// heap scan above it does).
func tableReads(t *testing.T, plan []byte, table string) (scans, indexes []string) {
	t.Helper()
	var top []struct {
		Plan planNode `json:"Plan"`
	}
	if err := json.Unmarshal(plan, &top); err != nil || len(top) != 1 {
		t.Fatalf("EXPLAIN's JSON: %v: %s", err, plan)
	}
	var walk func(n planNode)
	walk = func(n planNode) {
		if n.Relation == table && n.Type != "ModifyTable" {
			scans = append(scans, n.Type)
		}
		if n.Index != "" {
			indexes = append(indexes, n.Index)
		}
		for _, c := range n.Plans {
			walk(c)
		}
	}
	walk(top[0].Plan)
	return scans, indexes
}
