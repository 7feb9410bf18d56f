package relay_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/outbox"
)

// finiteChecks are the constraints of migration 003, by column.
var finiteChecks = []string{"created_at", "inserted_at", "available_at", "finished_at"}

// dropFiniteChecks makes the test's table accept 'infinity' timestamps,
// as a table from before migration 003 does.
func (e *env) dropFiniteChecks() {
	e.t.Helper()
	for _, column := range finiteChecks {
		e.exec(fmt.Sprintf(`ALTER TABLE {table} DROP CONSTRAINT %q`, e.table+"_"+column+"_check"))
	}
}

// A row whose created_at is 'infinity' (a non-Go producer can write one
// into a table without the checks) cannot become a time.Time. Claimed in
// one batch with good rows, it must become that row's own error — dead at
// once — and not fail the claim, which would spend an attempt of every row
// of the batch each cycle until all were dead, unpublished.
func TestUnreadableTimestampDiesAloneInItsBatch(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.bindQueue()
	got := consume(t, e.queue)
	e.dropFiniteChecks()

	ctx := context.Background()
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	var good []warren.Event
	var goodIDs []string
	for i := range 5 {
		ev := event(fmt.Sprintf("good-%d", i))
		good = append(good, ev)
		goodIDs = append(goodIDs, ev.ID)
	}
	if _, err := e.outbox.PublishBatch(ctx, tx, good); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %q (event_id, event_type, created_at) VALUES ('infinite', 'workitem.updated', 'infinity')`, e.table)); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	cfg := e.config(testenv.Name(t, "relay"))
	cfg.MaxAttempts = 3
	e.start(cfg)
	got.waitDistinct(t, len(good), 60*time.Second)
	testenv.WaitFor(t, 60*time.Second, "the infinite row dead", func() bool { return e.count("state = 'dead'") == 1 })
	got.requireOnce(t, goodIDs, &e.claims)
	const want = "created_at is infinity, not a point in time"
	if n := e.count("event_id = 'infinite' AND state = 'dead' AND attempts = 1 AND strpos(last_error, $1) > 0", want); n != 1 {
		var state, lastError string
		var attempts int
		e.pool.QueryRow(ctx, fmt.Sprintf(`SELECT state, attempts, coalesce(last_error, '') FROM %q WHERE event_id = 'infinite'`, e.table)).Scan(&state, &attempts, &lastError)
		t.Errorf("infinite row: %s after %d attempts, last_error %q; want dead after 1 attempt saying %q", state, attempts, lastError, want)
	}
	// The good rows may settle in another worker's batch, after the dead one.
	testenv.WaitFor(t, 60*time.Second, "only the dead row left", func() bool { return e.count("true") == 1 })
}

// Dead and Purge list a batch holding an unreadable row: the row comes
// with its DecodeErr, the others as usual, and Purge archives and deletes
// them all.
func TestDeadAndPurgeReportUnreadableRows(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	e.publishN("dead", 3)
	e.dropFiniteChecks()
	e.exec(`UPDATE {table} SET created_at = '-infinity' WHERE event_id = 'dead-1'`)
	e.exec(`UPDATE {table} SET state = 'dead', finished_at = now() - interval '1 hour', last_error = 'broker said no'`)

	requireRows := func(what string, rows []outbox.Row) {
		t.Helper()
		if len(rows) != 3 {
			t.Fatalf("%s: %d rows, want 3", what, len(rows))
		}
		for _, r := range rows {
			if r.LastError != "broker said no" || r.FinishedAt.IsZero() || r.InsertedAt.IsZero() {
				t.Errorf("%s: row %s not read whole: %+v", what, r.Event.ID, r)
			}
			switch {
			case r.Event.ID != "dead-1" && r.DecodeErr != nil:
				t.Errorf("%s: readable row %s has DecodeErr %v", what, r.Event.ID, r.DecodeErr)
			case r.Event.ID == "dead-1" && (r.DecodeErr == nil || !strings.Contains(r.DecodeErr.Error(), "created_at is -infinity")):
				t.Errorf("%s: row dead-1 has DecodeErr %v, want one naming created_at", what, r.DecodeErr)
			case r.Event.ID == "dead-1" && !r.Event.CreatedAt.IsZero():
				t.Errorf("%s: row dead-1 has CreatedAt %v, want zero", what, r.Event.CreatedAt)
			}
		}
	}
	rows, err := e.outbox.Dead(ctx, e.pool, outbox.Filter{})
	if err != nil {
		t.Fatalf("Dead: %v", err)
	}
	requireRows("Dead", rows)

	var archived []outbox.Row
	n, err := e.outbox.Purge(ctx, e.pool, outbox.PurgeOptions{Before: time.Now(), Archive: func(_ context.Context, rows []outbox.Row) error {
		archived = append(archived, rows...)
		return nil
	}})
	if err != nil || n != 3 {
		t.Fatalf("Purge: %d, %v; want 3", n, err)
	}
	requireRows("Purge's archive", archived)
	if left := e.count("true"); left != 0 {
		t.Errorf("%d rows left after the purge", left)
	}
}

// Migration 003 on a table that already holds infinite timestamps: pending
// rows holding one are made dead with a last_error naming the column,
// finished rows are left as they are, the migration succeeds, new
// infinities are refused, and a relay then works on the table — the checks,
// added NOT VALID, do not trip its claim.
func TestFiniteTimestampMigration(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.bindQueue()
	got := consume(t, e.queue)
	ctx := context.Background()

	// The table as it was before migration 003.
	e.dropFiniteChecks()
	e.exec(fmt.Sprintf(`DELETE FROM %q WHERE name = 'finite_timestamps'`, e.table+"_migrations"))
	e.publishN("ev", 4)
	e.exec(`UPDATE {table} SET created_at = 'infinity' WHERE event_id = 'ev-1'`)
	e.exec(`UPDATE {table} SET available_at = '-infinity', inserted_at = 'infinity' WHERE event_id = 'ev-2'`)
	e.exec(`UPDATE {table} SET created_at = 'infinity', state = 'dead', finished_at = now(), last_error = 'earlier' WHERE event_id = 'ev-3'`)

	res, err := e.outbox.Migrate(ctx, e.pool)
	if err != nil {
		t.Fatalf("Migrate over infinite timestamps: %v", err)
	}
	if res.From != outbox.SchemaVersion()-1 || res.To != outbox.SchemaVersion() {
		t.Fatalf("Migrate went from %d to %d; want the finite-timestamp step, %d to %d", res.From, res.To, outbox.SchemaVersion()-1, outbox.SchemaVersion())
	}
	for id, where := range map[string]string{
		"ev-1": `state = 'dead' AND finished_at IS NOT NULL AND last_error LIKE 'created_at is infinity, not a point in time; made dead%'`,
		"ev-2": `state = 'dead' AND last_error LIKE 'inserted_at is infinity; available_at is -infinity, not a point in time%'`,
		"ev-3": `state = 'dead' AND last_error = 'earlier' AND created_at = 'infinity'`,
	} {
		if e.count("event_id = $1 AND "+where, id) != 1 {
			t.Errorf("after the migration, row %s does not match %s", id, where)
		}
	}

	_, err = e.pool.Exec(ctx, fmt.Sprintf(`INSERT INTO %q (event_id, event_type, created_at) VALUES ('new', 'x', '-infinity')`, e.table))
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "23514" || !strings.Contains(pgErr.ConstraintName, "created_at_check") {
		t.Errorf("inserting an infinite created_at after the migration: %v; want a check violation", err)
	}

	e.start(e.config(testenv.Name(t, "relay")))
	got.waitDistinct(t, 1, 60*time.Second)
	testenv.WaitFor(t, 60*time.Second, "only the 3 dead rows left", func() bool { return e.count("true") == 3 })
	got.requireOnce(t, []string{"ev-0"}, &e.claims)
}
