package outbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/outbox"
)

// NotifyWhenIdle, the default: Publish notifies when no other row is due
// and unclaimed, and only then; NotifyEveryCommit notifies on every
// commit, NotifyNever on none. Whether a commit
// notified is read in order: a sentinel NOTIFY sent after it must be the
// next notification, with nothing from the commit before it.
func TestNotifyWhenIdle(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	idle, err := outbox.Open(e.table, outbox.Options{Notify: outbox.NotifyWhenIdle})
	if err != nil {
		t.Fatal(err)
	}
	listener := testenv.Listen(t, e.outbox.Channel())
	// publish commits id through ob and reports whether that commit sent a
	// notification; publishIn does so at an isolation level.
	var publishIn func(ob *outbox.Table, id string, iso pgx.TxIsoLevel) bool
	publish := func(ob *outbox.Table, id string) bool {
		t.Helper()
		return publishIn(ob, id, pgx.ReadCommitted)
	}
	publishIn = func(ob *outbox.Table, id string, iso pgx.TxIsoLevel) bool {
		t.Helper()
		err := pgx.BeginTxFunc(ctx, e.pool, pgx.TxOptions{IsoLevel: iso}, func(tx pgx.Tx) error {
			inserted, err := ob.Publish(ctx, tx, event(id))
			if err == nil && !inserted {
				t.Errorf("Publish(%s) reported the new event as not inserted", id)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.pool.Exec(ctx, "SELECT pg_notify($1, 'sentinel')", e.outbox.Channel()); err != nil {
			t.Fatal(err)
		}
		notified := false
		for {
			wait, cancel := context.WithTimeout(ctx, 10*time.Second)
			n, err := listener.WaitForNotification(wait)
			cancel()
			if err != nil {
				t.Fatalf("waiting for the notifications after Publish(%s): %v", id, err)
			}
			if n.Payload == "sentinel" {
				return notified
			}
			notified = true
		}
	}

	if !publish(idle, "first") {
		t.Fatal("NotifyWhenIdle: Publish into an empty table sent no NOTIFY; the relay would wait for its poll")
	}
	if publish(idle, "second") {
		t.Fatal("NotifyWhenIdle: Publish notified although an earlier row was due and unclaimed")
	}
	if e.count("true") != 2 {
		t.Fatalf("table holds %d rows, want 2: a skipped NOTIFY must not skip the row", e.count("true"))
	}
	if publish(e.outbox, "default") {
		t.Fatal("the default outbox notified although rows were due: its default must be NotifyWhenIdle")
	}
	every, err := outbox.Open(e.table, outbox.Options{Notify: outbox.NotifyEveryCommit})
	if err != nil {
		t.Fatal(err)
	}
	if !publish(every, "every") {
		t.Fatal("NotifyEveryCommit skipped the NOTIFY of a commit")
	}
	// A REPEATABLE READ snapshot can be older than the relay's last claim,
	// so the due rows it shows prove nothing about the relay: notify.
	if !publishIn(idle, "repeatable-read", pgx.RepeatableRead) {
		t.Fatal("NotifyWhenIdle: a REPEATABLE READ Publish skipped its NOTIFY on the grounds of its transaction's old snapshot")
	}
	if !publishIn(idle, "serializable", pgx.Serializable) {
		t.Fatal("NotifyWhenIdle: a SERIALIZABLE Publish skipped its NOTIFY on the grounds of its transaction's old snapshot")
	}
	// Claimed rows (leased: available_at in the future) and rows waiting
	// for a retry are not due: the relay may be idle, so notify.
	e.exec(`UPDATE {table} SET available_at = now() + interval '1 hour', claimed_by = 'test'`)
	if !publish(idle, "after-claim") {
		t.Fatal("NotifyWhenIdle: Publish sent no NOTIFY while every other row was claimed")
	}
	// Dead and delivered rows are never claimed, whatever their
	// available_at: counting them as due would silence every Publish for good.
	e.exec(`UPDATE {table} SET available_at = now() - interval '1 hour', claimed_by = NULL, state = 'dead'`)
	if !publish(idle, "after-dead") {
		t.Fatal("NotifyWhenIdle: Publish sent no NOTIFY while the only other rows were dead")
	}
	e.exec(`UPDATE {table} SET available_at = now() - interval '1 hour', claimed_by = NULL, state = 'delivered'`)
	if !publish(idle, "after-delivered") {
		t.Fatal("NotifyWhenIdle: Publish sent no NOTIFY while the only other rows were delivered")
	}

	// NotifyNever, for a table only CDC relays drain: never, even into an
	// empty table, and the row is still written.
	silent, err := outbox.Open(e.table, outbox.Options{Notify: outbox.NotifyNever})
	if err != nil {
		t.Fatal(err)
	}
	e.exec(`DELETE FROM {table}`)
	if publish(silent, "silent-1") || publish(silent, "silent-2") {
		t.Fatal("NotifyNever: Publish sent a NOTIFY")
	}
	if e.count("event_id LIKE 'silent-%'") != 2 {
		t.Fatalf("NotifyNever: %d rows written, want 2", e.count("event_id LIKE 'silent-%'"))
	}
	if _, err := outbox.Open(e.table, outbox.Options{Notify: "sometimes"}); err == nil {
		t.Error(`Open accepted Notify "sometimes"`)
	}
}
