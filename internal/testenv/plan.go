package testenv

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// GenericPlan returns how Postgres's generic plan of sql (the plan a
// statement pgx prepared gets after five runs) with args reads table: the
// kinds of the nodes that scan it, and the indexes the plan reads (a
// bitmap index scan names no table: the heap scan above it does).
// setup, when not empty, runs first in the same transaction (a SET LOCAL
// the caller runs before the statement). EXPLAIN without ANALYZE runs
// nothing, and the transaction is rolled back.
func GenericPlan(t testing.TB, pool *pgxpool.Pool, table, setup, sql string, args ...any) (scans, indexes []string, plan []byte) {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	for _, set := range []string{`SET LOCAL plan_cache_mode = force_generic_plan`, setup} {
		if _, err := tx.Exec(ctx, set); set != "" && err != nil {
			t.Fatal(err)
		}
	}
	// A prepared statement outlives the transaction: named for this call,
	// and deallocated.
	name := Name(t, "plan")
	if _, err := tx.Exec(ctx, `PREPARE `+name+` AS `+sql); err != nil {
		t.Fatalf("prepare %s: %v", sql, err)
	}
	defer tx.Exec(ctx, `DEALLOCATE `+name)
	// The simple protocol writes the arguments into the text, where
	// EXECUTE's parameters must be.
	marks := make([]string, len(args))
	for i := range args {
		marks[i] = fmt.Sprintf("$%d", i+1)
	}
	all := append([]any{pgx.QueryExecModeSimpleProtocol}, args...)
	execute := `EXPLAIN (FORMAT JSON) EXECUTE ` + name
	if len(args) > 0 {
		execute += `(` + strings.Join(marks, ", ") + `)`
	}
	if err := tx.QueryRow(ctx, execute, all...).Scan(&plan); err != nil {
		t.Fatalf("explain %s: %v", sql, err)
	}
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
	return scans, indexes, plan
}

// planNode is what GenericPlan reads of a node of EXPLAIN's JSON.
type planNode struct {
	Type     string     `json:"Node Type"`
	Relation string     `json:"Relation Name"`
	Index    string     `json:"Index Name"`
	Plans    []planNode `json:"Plans"`
}

// StaleStatistics makes the statistics of table say what they said when
// it was empty, and keeps autovacuum from mending them: the state in which
// a plan chosen on statistics goes wrong once the table fills up.
func StaleStatistics(t testing.TB, pool *pgxpool.Pool, table string) {
	t.Helper()
	quoted := pgx.Identifier{table}.Sanitize()
	for _, sql := range []string{
		`ALTER TABLE ` + quoted + ` SET (autovacuum_enabled = false)`,
		`ANALYZE ` + quoted,
	} {
		if _, err := pool.Exec(context.Background(), sql); err != nil {
			t.Fatal(err)
		}
	}
}
