package cdc_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/warrenmq/warren/internal/testenv"
)

// A fast shutdown of PostgreSQL is not held up by a relay with rows
// published and not yet settled. At a shutdown the walsender waits until
// its client reports every WAL position it was sent as flushed; the relay
// reports a position only once its rows are trimmed, and the trim's
// connection is the first thing the shutdown ends. A relay that tried
// that settle again for as long as the session lived kept the server
// from stopping for ever. Its session now ends on such a failure; once
// the server is back, every event arrives.
func TestAFastShutdownIsNotHeldByUnsettledRows(t *testing.T) {
	t.Parallel()
	const n = 100
	server := testenv.NewPrivatePostgres(t, "wal_level=logical")
	ctx := context.Background()
	pool := testenv.PoolAt(t, server.URL)
	e := newEnvOn(t, testenv.NewOutboxTableOn(t, pool))
	e.bindQueue()
	cfg := e.config()
	cfg.RetryMax = time.Second
	// The first relay makes the slot and backfills, so that the events
	// below come through the stream.
	r, stop := e.start(cfg)
	testenv.WaitFor(t, time.Minute, "the relay to stream", r.Streaming)
	testenv.WaitBackfilled(t, pool, e.ob.Table.Name(), e.slot)
	stop()
	ids := e.ob.PublishN("shutdown", n)

	// The lock keeps the published rows unsettled until the shutdown
	// ends the lock's session, and with it the lock.
	lock, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Rollback(ctx)
	if _, err := lock.Exec(ctx, `LOCK TABLE `+pgx.Identifier{e.ob.Table.Name()}.Sanitize()+` IN SHARE MODE`); err != nil {
		t.Fatal(err)
	}
	led := consumeLedger(t, e.queue, func() int64 { return 0 })
	e.start(cfg)
	testenv.WaitFor(t, time.Minute, "every event published", func() bool { return led.distinct() >= n })
	testenv.WaitFor(t, time.Minute, "the trim to wait on the lock", func() bool {
		var waiting bool
		err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE 'DELETE FROM %')`).Scan(&waiting)
		return err == nil && waiting
	})

	// A fast shutdown of an idle server takes a moment; a minute is room
	// for a busy machine, and a held shutdown never ends.
	if err := server.Stop(time.Minute); err != nil {
		t.Fatal(err)
	}
	server.Start()
	testenv.WaitFor(t, 2*time.Minute, "the table to be trimmed", func() bool {
		var left int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{e.ob.Table.Name()}.Sanitize()).Scan(&left)
		return err == nil && left == 0
	})
	for _, id := range ids {
		if !led.received(id) {
			t.Errorf("event %s was never published", id)
		}
	}
}
