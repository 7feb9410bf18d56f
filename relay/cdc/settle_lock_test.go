package cdc_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/warrenmq/warren/internal/testenv"
)

// A lock on the outbox that holds the trim past the settle's timeout (the
// SHARE lock of a CREATE INDEX) does not end the session: the settle is
// tried again until the lock goes, the pipeline waiting meanwhile, so the
// events published before it are not published again.
func TestALockedTrimIsRetriedNotASessionEnd(t *testing.T) {
	t.Parallel()
	const n = 200
	e := newEnv(t)
	e.bindQueue()
	cfg := e.config()
	r, stop := e.start(cfg)
	testenv.WaitFor(t, time.Minute, "the relay to stream", r.Streaming)
	testenv.WaitBackfilled(t, e.ob.Pool, e.ob.Table.Name(), e.slot)
	stop()
	e.ob.PublishN("locked", n)

	ctx := context.Background()
	lock, err := e.ob.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Rollback(ctx)
	if _, err := lock.Exec(ctx, `LOCK TABLE `+pgx.Identifier{e.ob.Table.Name()}.Sanitize()+` IN SHARE MODE`); err != nil {
		t.Fatal(err)
	}
	led := consumeLedger(t, e.queue, func() int64 { return 0 })
	r, _ = e.start(cfg)
	testenv.WaitFor(t, time.Minute, "every event published once", func() bool { return led.distinct() >= n })
	testenv.WaitFor(t, time.Minute, "the trim to wait on the lock", func() bool {
		var waiting bool
		err := e.ob.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE 'DELETE FROM %' || $1 || '%')`, e.ob.Table.Name()).Scan(&waiting)
		return err == nil && waiting
	})
	// The lock's length is the fault, not a synchronisation: past one
	// settle timeout (10s) from when the trim started waiting.
	<-time.After(11 * time.Second)
	if err := lock.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, time.Minute, "the table to be trimmed", func() bool { return e.ob.Count("true") == 0 })
	if got := len(led.snapshot()); got != n {
		t.Errorf("%d deliveries of %d events across a lock of the trim", got, n)
	}
	if h := r.Health(); h.LastError != "" {
		t.Errorf("the session ended: %s", h.LastError)
	}
}
