package testenv

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// CDCSlot prepares t for CDC relays on table and returns their default
// slot's name (the table's with "_cdc" appended). It fails t, with the
// hint to run scripts/services.sh, unless PostgreSQL runs with wal_level
// = logical; and when t ends it drops the slot, its publication and the
// table's CDC state table, on a connection of its own: a slot left behind
// keeps WAL on this machine for ever. Call it before the relays run, so
// that the drop runs after they stopped; the walsender of a relay that
// just stopped may hold the slot for a moment, so the drop tries again
// for a while.
func CDCSlot(t testing.TB, pool *pgxpool.Pool, table string) string {
	t.Helper()
	var level string
	if err := pool.QueryRow(context.Background(), `SHOW wal_level`).Scan(&level); err != nil {
		t.Fatal(err)
	}
	if level != "logical" {
		t.Fatalf("PostgreSQL runs with wal_level = %s; the CDC relay needs logical: run %s, which sets it and restarts PostgreSQL", level, StartCommand)
	}
	slot := table + "_cdc"
	url := pool.Config().ConnString() // the shared server's, or a private one's
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		db, err := pgxpool.New(ctx, url)
		if err != nil {
			t.Errorf("cleanup: %v", err)
			return
		}
		defer db.Close()
		deadline := time.Now().Add(20 * time.Second)
		for {
			_, err := db.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1`, slot)
			if err == nil {
				_, err = db.Exec(ctx, `DROP PUBLICATION IF EXISTS `+pgx.Identifier{slot}.Sanitize())
			}
			if err == nil { // the state table has the slot's name
				_, err = db.Exec(ctx, `DROP TABLE IF EXISTS `+pgx.Identifier{slot}.Sanitize())
			}
			if err == nil || time.Now().After(deadline) {
				if err != nil {
					t.Errorf("cleanup: drop slot %s: %v", slot, err)
				}
				return
			}
			time.Sleep(50 * time.Millisecond) // a cleanup's retry, not a test's synchronisation
		}
	})
	return slot
}

// WaitBackfilled waits until the CDC relay streaming slot has published
// the rows table held before the slot existed, as the table's CDC state
// table records: from then on every event is published from the stream
// alone, so one committed during the backfill is not published twice.
func WaitBackfilled(t testing.TB, pool *pgxpool.Pool, table, slot string) {
	t.Helper()
	WaitFor(t, 30*time.Second, "the relay's backfill of "+table, func() bool {
		var done bool
		err := pool.QueryRow(context.Background(), `SELECT backfilled_at IS NOT NULL FROM `+pgx.Identifier{table + "_cdc"}.Sanitize()+` WHERE slot = $1`, slot).Scan(&done)
		return err == nil && done
	})
}
