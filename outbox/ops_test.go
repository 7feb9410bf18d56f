package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/outbox"
)

func TestStats(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	s, err := e.outbox.Stats(ctx, e.pool)
	if err != nil {
		t.Fatal(err)
	}
	if s != (outbox.Stats{}) {
		t.Fatalf("stats of an empty table: %+v", s)
	}
	e.publishN("ev", 6)
	e.exec(`UPDATE {table} SET inserted_at = now() - interval '10 minutes' WHERE event_id = 'ev-0'`)
	e.exec(`UPDATE {table} SET claimed_by = 'r', attempts = 1, claims = 1, available_at = now() + interval '1 minute' WHERE event_id = 'ev-1'`)
	e.exec(`UPDATE {table} SET attempts = 1, claims = 1, available_at = now() + interval '1 minute' WHERE event_id = 'ev-2'`)
	e.exec(`UPDATE {table} SET state = 'dead', finished_at = now() WHERE event_id IN ('ev-3', 'ev-4')`)
	e.exec(`UPDATE {table} SET state = 'delivered', finished_at = now() WHERE event_id = 'ev-5'`)
	s, err = e.outbox.Stats(ctx, e.pool)
	if err != nil {
		t.Fatal(err)
	}
	age := s.OldestPendingAge
	s.OldestPendingAge = 0
	if want := (outbox.Stats{Pending: 3, InFlight: 1, Retrying: 1, Dead: 2, Delivered: 1}); s != want {
		t.Errorf("stats %+v, want %+v", s, want)
	}
	if age < 10*time.Minute || age > 11*time.Minute {
		t.Errorf("oldest pending age %v, want about 10m", age)
	}
}

func TestPurge(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.publishN("old-delivered", 5)
	e.publishN("old-dead", 2)
	e.publishN("new-delivered", 2)
	e.publishN("old-pending", 3)
	e.exec(`UPDATE {table} SET state = 'delivered', finished_at = now() - interval '3 days' WHERE event_id LIKE 'old-delivered-%'`)
	e.exec(`UPDATE {table} SET state = 'dead', finished_at = now() - interval '3 days' WHERE event_id LIKE 'old-dead-%'`)
	e.exec(`UPDATE {table} SET state = 'delivered', finished_at = now() - interval '1 hour' WHERE event_id LIKE 'new-delivered-%'`)
	e.exec(`UPDATE {table} SET inserted_at = now() - interval '3 days' WHERE event_id LIKE 'old-pending-%'`)
	cutoff := time.Now().Add(-48 * time.Hour)

	// A failing archive deletes nothing.
	var offered int
	n, err := e.outbox.Purge(ctx, e.pool, outbox.PurgeOptions{Before: cutoff, Archive: func(_ context.Context, rows []outbox.Row) error {
		offered += len(rows)
		return errors.New("archive store is down")
	}})
	if !errors.Is(err, outbox.ErrArchiveFailed) || n != 0 {
		t.Fatalf("Purge with a failing archive: %d, %v; want 0 and ErrArchiveFailed", n, err)
	}
	if offered == 0 {
		t.Fatal("the archive hook was never called")
	}
	if left := e.count("true"); left != 12 {
		t.Fatalf("a failing archive deleted %d rows", 12-left)
	}

	var mu sync.Mutex
	var archived [][]string
	archive := func(_ context.Context, rows []outbox.Row) error {
		var ids []string
		for _, r := range rows {
			if r.Event.Type != "workitem.updated" || r.FinishedAt.IsZero() {
				return fmt.Errorf("archive got an incomplete row %+v", r)
			}
			ids = append(ids, r.Event.ID)
		}
		mu.Lock()
		archived = append(archived, ids)
		mu.Unlock()
		return nil
	}
	n, err = e.outbox.Purge(ctx, e.pool, outbox.PurgeOptions{Before: cutoff, States: []outbox.State{outbox.Dead}, Archive: archive})
	if err != nil || n != 2 {
		t.Fatalf("purge dead: %d, %v; want 2", n, err)
	}
	n, err = e.outbox.Purge(ctx, e.pool, outbox.PurgeOptions{Before: cutoff, BatchSize: 2, Archive: archive})
	if err != nil || n != 5 {
		t.Fatalf("purge: %d, %v; want 5", n, err)
	}
	var sizes []int
	for _, batch := range archived {
		sizes = append(sizes, len(batch))
	}
	if !slices.Equal(sizes, []int{2, 2, 2, 1}) {
		t.Errorf("archive batches %v, want [2 2 2 1]", sizes)
	}
	if left := e.count("event_id LIKE 'new-delivered-%' OR event_id LIKE 'old-pending-%'"); left != 5 || e.count("true") != 5 {
		t.Errorf("purge removed rows newer than the cutoff or pending rows")
	}

	for name, opts := range map[string]outbox.PurgeOptions{
		"no cutoff":     {},
		"pending state": {Before: cutoff, States: []outbox.State{outbox.Pending}},
	} {
		if _, err := e.outbox.Purge(ctx, e.pool, opts); !errors.Is(err, outbox.ErrInvalidConfig) {
			t.Errorf("%s: got %v, want ErrInvalidConfig", name, err)
		}
	}
}

// unmigratedTable is a table name for the test, dropped with its
// migrations record when the test ends, not yet created.
func unmigratedTable(t *testing.T) (string, *outbox.Table) {
	t.Helper()
	table := testenv.Name(t, "ob")
	testenv.DropTables(t, table, table+"_migrations")
	ob, err := outbox.New(table)
	if err != nil {
		t.Fatal(err)
	}
	return table, ob
}

func TestMigrate(t *testing.T) {
	pool := testenv.PgPool(t)
	ctx := context.Background()
	table, ob := unmigratedTable(t)
	if err := ob.CheckSchema(ctx, pool); !errors.Is(err, outbox.ErrSchema) {
		t.Fatalf("CheckSchema before Migrate: %v, want ErrSchema", err)
	}

	// Several processes starting at once all succeed; one of them creates.
	results := make([]outbox.MigrateResult, 4)
	errs := make([]error, 4)
	var wg sync.WaitGroup
	for i := range results {
		wg.Go(func() { results[i], errs[i] = ob.Migrate(ctx, pool) })
	}
	wg.Wait()
	created := 0
	for i, res := range results {
		if errs[i] != nil {
			t.Fatalf("concurrent Migrate: %v", errs[i])
		}
		if res.To != outbox.SchemaVersion() {
			t.Errorf("Migrate ended at version %d, want %d", res.To, outbox.SchemaVersion())
		}
		if res.From == 0 {
			created++
		}
	}
	if created != 1 {
		t.Errorf("%d Migrate calls created the table, want 1", created)
	}
	if err := ob.CheckSchema(ctx, pool); err != nil {
		t.Fatal(err)
	}

	// A database migrated by a newer warren is refused, not altered.
	if _, err := pool.Exec(ctx, fmt.Sprintf(`INSERT INTO %q (version, name) VALUES (99, 'future')`, table+"_migrations")); err != nil {
		t.Fatal(err)
	}
	if err := ob.CheckSchema(ctx, pool); !errors.Is(err, outbox.ErrSchema) {
		t.Errorf("CheckSchema on a newer schema: %v", err)
	}
	if _, err := ob.Migrate(ctx, pool); !errors.Is(err, outbox.ErrSchema) {
		t.Errorf("Migrate on a newer schema: %v", err)
	}
}

// Migrate checks what its record says it made. A table dropped while its
// record remained is created again (reported as Recreated): producers
// can write again, and the loss is said. A table that lost an index or a
// constraint its steps made is an error naming each.
func TestMigrateAfterTheTableWasDropped(t *testing.T) {
	pool := testenv.PgPool(t)
	ctx := context.Background()
	table, ob := unmigratedTable(t)
	if _, err := ob.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	exec := func(sql string) {
		t.Helper()
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}

	exec(fmt.Sprintf(`DROP TABLE %q`, table))
	res, err := ob.Migrate(ctx, pool)
	if err != nil || !res.Recreated || res.From != outbox.SchemaVersion() || res.To != outbox.SchemaVersion() {
		t.Fatalf("Migrate after DROP TABLE: %+v, %v; want the table created again at version %d", res, err, outbox.SchemaVersion())
	}
	if err := ob.CheckSchema(ctx, pool); err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := ob.Publish(ctx, tx, testenv.OutboxEvent("after-recreate")); err != nil {
		t.Fatalf("Publish to the re-created table: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if res, err := ob.Migrate(ctx, pool); err != nil || res.Recreated || res.From != res.To {
		t.Errorf("Migrate again: %+v, %v; want up to date", res, err)
	}

	exec(fmt.Sprintf(`DROP INDEX %q`, table+"_claim_idx"))
	exec(fmt.Sprintf(`ALTER TABLE %q DROP CONSTRAINT %q`, table, table+"_event_id_key"))
	_, err = ob.Migrate(ctx, pool)
	if !errors.Is(err, outbox.ErrSchema) || !strings.Contains(err.Error(), table+"_claim_idx, "+table+"_event_id_key") {
		t.Errorf("Migrate without an index and a constraint: %v; want ErrSchema naming both", err)
	}
	var n int
	if err := pool.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %q`, table)).Scan(&n); err != nil || n != 1 {
		t.Errorf("%d rows (%v) after the refused Migrate, want the one kept", n, err)
	}
}
