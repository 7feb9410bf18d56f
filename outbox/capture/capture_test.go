package capture_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/outbox/capture"
)

const ws = "7f5e5b8a-1c2d-4e3f-9a0b-1c2d3e4f5a6b"

// Each kind of change on a captured table writes exactly the event it
// should, and a change to nothing tracked writes none.
func TestCaptureWritesOneEventPerChange(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.install(e.spec())
	_, last := e.events(0)

	// Insert: .created with every tracked column and no previous attributes.
	e.exec(`INSERT INTO {source} (id, name, state, description_html, meta, project_id)
		VALUES ('iss-1', 'Fix login', 'todo', '<p>long</p>', '{"a": 1}', '0b7c5e2a-9f7d-4c1e-8a53-2f0f4f1c9d11')`)
	ev, last := e.one(last, "workitem.created")
	if ev.EntityType != "issue" || ev.EntityID != "iss-1" || ev.WorkspaceID != ws || ev.ProjectID == nil ||
		*ev.ProjectID != "0b7c5e2a-9f7d-4c1e-8a53-2f0f4f1c9d11" || ev.InitiatorType != "USER" || ev.InitiatorID != nil {
		t.Errorf("created envelope: %+v", ev)
	}
	if got := keys(ev.Data); got != "deleted_at,id,meta,name,priority,project_id,sort_order,state,workspace_id" {
		t.Errorf("created data has %s; want the tracked columns, description_html left out", got)
	}
	if ev.Data["name"] != "Fix login" || !ev.PreviousNull {
		t.Errorf("created payload: data %v, previous_attributes null %v", ev.Data, ev.PreviousNull)
	}

	// Update of tracked columns: .updated, previous_attributes holds only
	// the old values of what changed.
	e.exec(`UPDATE {source} SET state = 'done', priority = 'high', name = name WHERE id = 'iss-1'`)
	ev, last = e.one(last, "workitem.updated")
	if keys(ev.Previous) != "priority,state" || ev.Previous["state"] != "todo" || ev.Previous["priority"] != nil {
		t.Errorf("previous_attributes %v, want {priority: null, state: todo}", ev.Previous)
	}
	if ev.Data["state"] != "done" || ev.Data["priority"] != "high" {
		t.Errorf("updated data %v", ev.Data)
	}

	// Updates that change nothing tracked: none.
	e.exec(`UPDATE {source} SET description_html = '<p>longer</p>' WHERE id = 'iss-1'`)
	e.none(last, "update of an excluded column")
	e.exec(`UPDATE {source} SET state = 'done' WHERE id = 'iss-1'`)
	e.none(last, "update to the same value")
	e.exec(`UPDATE {source} SET state = 'done' WHERE id = 'no-such-row'`)
	e.none(last, "update of no row")

	// A json column has no = operator: it is compared as text.
	e.exec(`UPDATE {source} SET meta = '{"a": 2}' WHERE id = 'iss-1'`)
	ev, last = e.one(last, "workitem.updated")
	if keys(ev.Previous) != "meta" {
		t.Errorf("json column change: previous_attributes %v", ev.Previous)
	}

	// The initiator comes from the session settings, here for one
	// transaction.
	ctx := context.Background()
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	for _, q := range []string{`SET LOCAL warren.initiator_type = 'SYSTEM.AUTOMATION'`, `SET LOCAL warren.initiator_id = 'user-9'`,
		e.render(`UPDATE {source} SET sort_order = 2.5 WHERE id = 'iss-1'`)} {
		if _, err := tx.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	ev, last = e.one(last, "workitem.updated")
	if ev.InitiatorType != "SYSTEM.AUTOMATION" || ev.InitiatorID == nil || *ev.InitiatorID != "user-9" {
		t.Errorf("initiator from the session: type %q id %v", ev.InitiatorType, ev.InitiatorID)
	}

	// Soft delete: deleted_at from NULL to a time is .deleted.
	e.exec(`UPDATE {source} SET deleted_at = now() WHERE id = 'iss-1'`)
	ev, last = e.one(last, "workitem.deleted")
	if keys(ev.Previous) != "deleted_at" || ev.Data["deleted_at"] == nil {
		t.Errorf("soft delete: data %v previous_attributes %v", ev.Data, ev.Previous)
	}
	// Removing the soft-deleted row later announces nothing more.
	e.exec(`DELETE FROM {source} WHERE id = 'iss-1'`)
	e.none(last, "hard delete of a soft-deleted row")

	// Hard delete of a live row: .deleted with the old row.
	e.exec(`INSERT INTO {source} (id, name) VALUES ('iss-2', 'Other')`)
	_, last = e.one(last, "workitem.created")
	e.exec(`DELETE FROM {source} WHERE id = 'iss-2'`)
	ev, last = e.one(last, "workitem.deleted")
	if ev.EntityID != "iss-2" || ev.Data["name"] != "Other" || !ev.PreviousNull {
		t.Errorf("hard delete: %+v", ev)
	}

	// A changed key ends one entity and starts another.
	e.exec(`INSERT INTO {source} (id, name) VALUES ('iss-3', 'Renamed')`)
	_, last = e.one(last, "workitem.created")
	e.exec(`UPDATE {source} SET id = 'iss-4' WHERE id = 'iss-3'`)
	evs, _ := e.events(last)
	if len(evs) != 2 {
		t.Fatalf("key change: want a deleted and a created event, got %+v", evs)
	}
	got := map[string]string{evs[0].Type: evs[0].EntityID, evs[1].Type: evs[1].EntityID}
	if got["workitem.deleted"] != "iss-3" || got["workitem.created"] != "iss-4" {
		t.Errorf("key change: %v", got)
	}
}

// One UPDATE of 10,000 rows writes 10,000 events, one per row, each with
// its own old value, and wakes the relay once it commits.
func TestCaptureBulkUpdate(t *testing.T) {
	t.Parallel()
	const n = 10000
	e := newEnv(t)
	e.install(e.spec())
	e.exec(`INSERT INTO {source} (id, name, state) SELECT 'bulk-' || i, 'item ' || i, 'todo-' || i FROM generate_series(1, $1) i`, n)
	evs, last := e.events(0)
	if len(evs) != n {
		t.Fatalf("insert of %d rows wrote %d events", n, len(evs))
	}

	ctx := context.Background()
	listener := testenv.Listen(t, e.outbox.Channel())

	e.exec(`UPDATE {source} SET state = 'done'`)
	evs, last = e.events(last)
	if len(evs) != n {
		t.Fatalf("bulk update of %d rows wrote %d events", n, len(evs))
	}
	seen := map[string]bool{}
	for _, ev := range evs {
		if ev.Type != "workitem.updated" || keys(ev.Previous) != "state" || ev.Previous["state"] != "todo-"+strings.TrimPrefix(ev.EntityID, "bulk-") {
			t.Fatalf("bulk update event %+v", ev)
		}
		seen[ev.EntityID] = true
	}
	if len(seen) != n {
		t.Fatalf("bulk update events name %d entities, want %d", len(seen), n)
	}
	wait, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	note, err := listener.WaitForNotification(wait)
	if err != nil || note.Channel != e.outbox.Channel() {
		t.Fatalf("no NOTIFY on %s after the bulk update: %v %+v", e.outbox.Channel(), err, note)
	}

	e.exec(`UPDATE {source} SET description_html = 'x'`)
	e.none(last, "bulk update of an excluded column")
}

// poison makes the outbox refuse one entity's events, as a full disk or
// a broken constraint would refuse them all.
func (e *env) poison(entityID string) {
	e.exec(fmt.Sprintf(`ALTER TABLE {outbox} ADD CONSTRAINT poison CHECK (entity_id <> '%s') NOT VALID`, entityID))
}

// Fail: an event that cannot be written fails the statement, so the
// change is not made either.
func TestCaptureFailPolicyFailsTheStatement(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.install(e.spec())
	e.poison("bad")
	err := e.try(`INSERT INTO {source} (id, name) VALUES ('good', 'a'), ('bad', 'b')`)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "23514" || pgErr.ConstraintName != "poison" {
		t.Fatalf("insert whose event the outbox refuses: %v, want the check violation", err)
	}
	var rows int
	if err := e.pool.QueryRow(context.Background(), e.render(`SELECT count(*) FROM {source}`)).Scan(&rows); err != nil || rows != 0 {
		t.Fatalf("the failed statement left %d rows (%v)", rows, err)
	}
	e.none(0, "failed statement")
	e.exec(`INSERT INTO {source} (id, name) VALUES ('good', 'a')`)
	e.one(0, "workitem.created")
}

// Record: the statement succeeds, and the failure is a row in the
// capture errors table, counted by Stats.
func TestCaptureRecordPolicyRecordsTheFailure(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	spec := e.spec()
	spec.OnFailure = capture.Record
	e.install(spec)
	ctx := context.Background()
	if s, err := e.outbox.Stats(ctx, e.pool); err != nil || s.CaptureErrors != 0 {
		t.Fatalf("stats before any failure: %+v, %v", s, err)
	}
	e.exec(`INSERT INTO {source} (id, name) VALUES ('good', 'a'), ('bad', 'b')`)
	e.poison("bad")
	e.exec(`UPDATE {source} SET state = 'done'`)

	var rows int
	if err := e.pool.QueryRow(ctx, e.render(`SELECT count(*) FROM {source} WHERE state = 'done'`)).Scan(&rows); err != nil || rows != 2 {
		t.Fatalf("the update under Record changed %d rows (%v), want 2", rows, err)
	}
	evs, _ := e.events(0)
	if len(evs) != 2 { // the two created events; the update's batch was refused whole
		t.Fatalf("outbox holds %d events, want the 2 created: %+v", len(evs), evs)
	}
	var (
		source, op, state, message string
		ids                        []string
		at                         time.Time
	)
	err := e.pool.QueryRow(ctx, fmt.Sprintf(`SELECT source_table, operation, entity_ids, sqlstate, message, occurred_at FROM %s`,
		pgx.Identifier{e.outbox.CaptureErrorsTable()}.Sanitize())).Scan(&source, &op, &ids, &state, &message, &at)
	if err != nil {
		t.Fatal(err)
	}
	if source != "public."+e.table || op != "UPDATE" || strings.Join(ids, ",") != "bad,good" && strings.Join(ids, ",") != "good,bad" ||
		state != "23514" || !strings.Contains(message, "poison") || time.Since(at) > time.Hour {
		t.Errorf("recorded failure: %s %s %v %s %q %v", source, op, ids, state, message, at)
	}
	if s, err := e.outbox.Stats(ctx, e.pool); err != nil || s.CaptureErrors != 1 {
		t.Errorf("stats after one failure: %+v, %v", s, err)
	}
}

// An update is compared on what the payload shows: numeric 1.0 to 1.00,
// and 'Done' to 'DONE' under a case-insensitive collation (citext's
// case too), are changes although = calls them equal.
func TestCaptureUpdateComparesWhatThePayloadShows(t *testing.T) {
	t.Parallel()
	pool := testenv.PgPool(t)
	ctx := context.Background()
	collation := pgx.Identifier{testenv.Name(t, "ci")}.Sanitize()
	if _, err := pool.Exec(ctx, `CREATE COLLATION `+collation+` (provider = icu, locale = 'und-u-ks-level2', deterministic = false)`); err != nil {
		t.Skipf("this Postgres cannot create a case-insensitive ICU collation (%v); the case comparison is not tested", err)
	}
	t.Cleanup(func() { // after newEnv's cleanups drop the table that uses it
		if _, err := pool.Exec(context.Background(), `DROP COLLATION `+collation); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	e := newEnv(t)
	e.exec(`ALTER TABLE {source} ADD COLUMN amount numeric, ADD COLUMN label text COLLATE ` + collation)
	e.install(e.spec())
	e.exec(`INSERT INTO {source} (id, name, amount, label) VALUES ('a', 'x', 1.0, 'Done')`)
	_, last := e.one(0, "workitem.created")

	var previous string
	e.exec(`UPDATE {source} SET amount = 1.00`)
	_, last = e.one(last, "workitem.updated")
	if err := e.pool.QueryRow(ctx, e.render(`SELECT payload->>'previous_attributes' FROM {outbox} WHERE id = $1`), last).Scan(&previous); err != nil ||
		previous != `{"amount": 1.0}` {
		t.Fatalf("numeric scale change: previous_attributes %s (%v), want the old 1.0", previous, err)
	}
	e.exec(`UPDATE {source} SET label = 'DONE'`)
	ev, last := e.one(last, "workitem.updated")
	if keys(ev.Previous) != "label" || ev.Previous["label"] != "Done" || ev.Data["label"] != "DONE" {
		t.Fatalf("case change under a case-insensitive collation: %+v", ev)
	}
	e.exec(`UPDATE {source} SET label = 'DONE', amount = 1.00`)
	e.none(last, "update to the same values")
}

// Record does not record what a retry would cure: an outbox insert that
// cannot get its lock in lock_timeout fails the statement, so the
// application retries it, and no capture error is written.
func TestCaptureRecordPolicyLetsRetryableErrorsFail(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	spec := e.spec()
	spec.OnFailure = capture.Record
	e.install(spec)
	ctx := context.Background()

	holder, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(ctx)
	// SHARE conflicts with the ROW EXCLUSIVE lock an INSERT needs, and is
	// held until holder ends: the writer's wait can only end in its timeout.
	if _, err := holder.Exec(ctx, e.render(`LOCK TABLE {outbox} IN SHARE MODE`)); err != nil {
		t.Fatal(err)
	}
	writer, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Rollback(ctx)
	if _, err := writer.Exec(ctx, `SET LOCAL lock_timeout = '100ms'`); err != nil {
		t.Fatal(err)
	}
	_, err = writer.Exec(ctx, e.render(`INSERT INTO {source} (id, name) VALUES ('a', 'x')`))
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "55P03" {
		t.Fatalf("insert whose event waits out lock_timeout under Record: %v, want the lock timeout (55P03)", err)
	}
	if err := writer.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := holder.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if s, err := e.outbox.Stats(ctx, e.pool); err != nil || s.CaptureErrors != 0 {
		t.Fatalf("stats after a lock timeout: %+v, %v; want no capture error", s, err)
	}
	// The application's retry writes the row and its event.
	e.exec(`INSERT INTO {source} (id, name) VALUES ('a', 'x')`)
	e.one(0, "workitem.created")
}
