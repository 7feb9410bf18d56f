package capture_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/outbox"
	"github.com/warrenmq/warren/outbox/capture"
)

// env is one test's captured table and outbox, both unique to the test
// and dropped when it ends.
type env struct {
	t      *testing.T
	pool   *pgxpool.Pool
	outbox *outbox.Table
	table  string // the captured table
}

// issuesDDL is a table shaped like Plane's issues: a uuid key, tracked
// fields, a large field to leave out, a json column (no = operator), the
// workspace and project, and a soft delete column.
const issuesDDL = `CREATE TABLE {source} (
	id               text PRIMARY KEY,
	name             text NOT NULL,
	state            text,
	priority         text,
	sort_order       double precision,
	description_html text,
	meta             json,
	workspace_id     uuid NOT NULL DEFAULT '7f5e5b8a-1c2d-4e3f-9a0b-1c2d3e4f5a6b',
	project_id       uuid,
	deleted_at       timestamptz
)`

func newEnv(t *testing.T) *env {
	t.Helper()
	return newEnvWith(t, issuesDDL)
}

// newEnvWith is newEnv with the captured table made by ddl, in which
// {source} is its name.
func newEnvWith(t *testing.T, ddl string) *env {
	t.Helper()
	ob := testenv.NewOutboxTable(t)
	e := &env{t: t, pool: ob.Pool, outbox: ob.Table, table: testenv.Name(t, "src")}
	testenv.DropTables(t, e.table, ob.Table.CaptureErrorsTable())
	// Dropping the table drops its triggers; the function and the
	// migration records are removed here. The records' table is made by
	// the first Install on the database: on a fresh one, a test that
	// installs nothing may end before any test made it.
	t.Cleanup(func() {
		ctx := context.Background()
		_, err := e.pool.Exec(ctx, fmt.Sprintf(`DROP FUNCTION IF EXISTS %s() CASCADE`, pgx.Identifier{e.table + "_warren_capture"}.Sanitize()))
		var recorded bool
		if err == nil {
			err = e.pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, capture.MigrationsTable).Scan(&recorded)
		}
		if err == nil && recorded {
			_, err = e.pool.Exec(ctx, `DELETE FROM `+capture.MigrationsTable+` WHERE name = $1`, "public."+e.table)
		}
		if err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	e.exec(ddl)
	return e
}

// spec is the test's Plane-like spec: workitem events for the issue
// entity, description_html left out.
func (e *env) spec() capture.Spec {
	return capture.Spec{
		Table: e.table, EntityType: "issue", EventPrefix: "workitem", Outbox: e.outbox.Name(),
		Exclude: []string{"description_html"}, WorkspaceColumn: "workspace_id", ProjectColumn: "project_id",
	}
}

func (e *env) install(spec capture.Spec) capture.Result {
	e.t.Helper()
	res, err := capture.Install(context.Background(), e.pool, spec)
	if err != nil {
		e.t.Fatalf("Install: %v", err)
	}
	return res
}

// exec runs sql with {source} and {outbox} replaced by the quoted names.
func (e *env) exec(sql string, args ...any) {
	e.t.Helper()
	if err := e.try(sql, args...); err != nil {
		e.t.Fatalf("%s: %v", sql, err)
	}
}

// execAs runs sql as exec does, in a transaction whose
// session_replication_role is role ("replica", as bulk loaders and
// logical replication's workers set it).
func (e *env) execAs(role, sql string, args ...any) {
	e.t.Helper()
	if err := e.tryAs(role, sql, args...); err != nil {
		e.t.Fatalf("%s (session_replication_role %s): %v", sql, role, err)
	}
}

func (e *env) tryAs(role, sql string, args ...any) error {
	ctx := context.Background()
	return pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT set_config('session_replication_role', $1, true)`, role); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, e.render(sql), args...)
		return err
	})
}

func (e *env) try(sql string, args ...any) error {
	_, err := e.pool.Exec(context.Background(), e.render(sql), args...)
	return err
}

func (e *env) render(sql string) string {
	return strings.NewReplacer("{source}", pgx.Identifier{e.table}.Sanitize(), "{outbox}", pgx.Identifier{e.outbox.Name()}.Sanitize()).Replace(sql)
}

// captured is one outbox row as the trigger wrote it.
type captured struct {
	EventID, Type, EntityType, EntityID, WorkspaceID string
	ProjectID, InitiatorID                           *string
	InitiatorType                                    string
	Data                                             map[string]any
	Previous                                         map[string]any
	PreviousNull                                     bool
}

// events returns the rows of the outbox written after the row id after,
// in order, and the id of the last.
func (e *env) events(after int64) ([]captured, int64) {
	e.t.Helper()
	rows, err := e.pool.Query(context.Background(), e.render(`
		SELECT id, event_id, event_type, entity_type, entity_id, workspace_id, project_id, initiator_id, initiator_type,
			payload->'data', payload->'previous_attributes'
		FROM {outbox} WHERE id > $1 ORDER BY id`), after)
	if err != nil {
		e.t.Fatal(err)
	}
	defer rows.Close()
	var out []captured
	last := after
	for rows.Next() {
		var c captured
		var data, prev []byte
		if err := rows.Scan(&last, &c.EventID, &c.Type, &c.EntityType, &c.EntityID, &c.WorkspaceID, &c.ProjectID,
			&c.InitiatorID, &c.InitiatorType, &data, &prev); err != nil {
			e.t.Fatal(err)
		}
		if err := json.Unmarshal(data, &c.Data); err != nil {
			e.t.Fatalf("payload.data %s: %v", data, err)
		}
		c.PreviousNull = string(prev) == "null"
		if err := json.Unmarshal(prev, &c.Previous); err != nil {
			e.t.Fatalf("payload.previous_attributes %s: %v", prev, err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		e.t.Fatal(err)
	}
	return out, last
}

// one asserts that exactly one event was written after the row id after,
// and returns it and its row id.
func (e *env) one(after int64, wantType string) (captured, int64) {
	e.t.Helper()
	evs, last := e.events(after)
	if len(evs) != 1 {
		e.t.Fatalf("want one %s event, got %d: %+v", wantType, len(evs), evs)
	}
	if evs[0].Type != wantType {
		e.t.Fatalf("event type %q, want %q: %+v", evs[0].Type, wantType, evs[0])
	}
	return evs[0], last
}

// none asserts that nothing was written after the row id after.
func (e *env) none(after int64, why string) {
	e.t.Helper()
	if evs, _ := e.events(after); len(evs) != 0 {
		e.t.Fatalf("%s: want no event, got %d: %+v", why, len(evs), evs)
	}
}

// keys lists a JSON object's keys, sorted.
func keys(m map[string]any) string {
	return strings.Join(slices.Sorted(maps.Keys(m)), ",")
}
