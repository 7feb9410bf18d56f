package capture_test

import (
	"context"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/outbox"
	"github.com/warrenmq/warren/outbox/capture"
)

// A table captured on both ends of a logical replication: the
// subscriber's apply worker runs under session_replication_role =
// replica, where the triggers fire (ALWAYS). Installed with no choice
// (SubscriberRefuse) the replicated write fails and is retried, so it
// never commits without its event nor writes it twice; with
// SubscriberSkip it commits with no event on the subscriber (the
// publisher wrote it), while the subscriber's own writes still write
// theirs; with SubscriberCapture the subscriber writes it.
func TestCaptureOnALogicalReplicationSubscriber(t *testing.T) {
	t.Parallel()
	server := testenv.PrivatePostgres(t, "wal_level=logical", "wal_retrieve_retry_interval=100ms")
	ctx := context.Background()
	pools := map[string]*pgxpool.Pool{}
	for _, db := range []string{"pub", "sub"} {
		admin := testenv.PoolAt(t, server)
		if _, err := admin.Exec(ctx, "CREATE DATABASE "+db); err != nil {
			t.Fatal(err)
		}
		u, _ := url.Parse(server)
		u.Path = "/" + db
		p := testenv.PoolAt(t, u.String())
		pools[db] = p
		ob, err := outbox.New("warren_outbox")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ob.Migrate(ctx, p); err != nil {
			t.Fatal(err)
		}
		if _, err := p.Exec(ctx, `CREATE TABLE issues (id text PRIMARY KEY, name text)`); err != nil {
			t.Fatal(err)
		}
	}
	pub, sub := pools["pub"], pools["sub"]
	install := func(p *pgxpool.Pool, policy capture.SubscriberPolicy) {
		t.Helper()
		if _, err := capture.Install(ctx, p, capture.Spec{Table: "issues", Outbox: "warren_outbox", Subscriber: policy}); err != nil {
			t.Fatal(err)
		}
	}
	count := func(p *pgxpool.Pool, sql string) int {
		t.Helper()
		var n int
		if err := p.QueryRow(ctx, sql).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	events := func(p *pgxpool.Pool, id string) int {
		return count(p, fmt.Sprintf(`SELECT count(*) FROM warren_outbox WHERE entity_id = '%s'`, id))
	}
	exec := func(p *pgxpool.Pool, sql string) {
		t.Helper()
		if _, err := p.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	install(pub, "")
	install(sub, "") // SubscriberRefuse
	exec(pub, `CREATE PUBLICATION p FOR TABLE issues`)
	exec(pub, `SELECT pg_create_logical_replication_slot('s', 'pgoutput')`)
	u, _ := url.Parse(server)
	conninfo := fmt.Sprintf("host=127.0.0.1 port=%s dbname=pub user=postgres", u.Port())
	exec(sub, `CREATE SUBSCRIPTION s CONNECTION '`+conninfo+`' PUBLICATION p WITH (create_slot = false, slot_name = 's')`)
	t.Cleanup(func() { sub.Exec(context.Background(), `DROP SUBSCRIPTION s`) })

	// Refused: the worker (here the table synchronisation worker, whose
	// initial COPY fires the triggers too) fails on the write, and retries.
	exec(pub, `INSERT INTO issues VALUES ('a', 'x')`)
	testenv.WaitFor(t, 20*time.Second, "the subscriber's replication workers to fail on the replicated write", func() bool {
		return count(sub, `SELECT coalesce(sum(apply_error_count + sync_error_count), 0)::int FROM pg_stat_subscription_stats`) > 0
	})
	if n := count(sub, `SELECT count(*) FROM issues`); n != 0 || events(sub, "a") != 0 || events(pub, "a") != 1 {
		t.Fatalf("refused: the subscriber holds %d rows and %d events; the publisher %d events", n, events(sub, "a"), events(pub, "a"))
	}

	// Skip: the publisher wrote the event; the subscriber's own writes
	// still write theirs.
	install(sub, capture.SubscriberSkip)
	testenv.WaitFor(t, time.Minute, "the replicated row on the subscriber", func() bool {
		return count(sub, `SELECT count(*) FROM issues WHERE id = 'a'`) == 1
	})
	if events(sub, "a") != 0 || events(pub, "a") != 1 {
		t.Fatalf("skip: the replicated row wrote %d events on the subscriber and %d on the publisher; want 0 and 1", events(sub, "a"), events(pub, "a"))
	}
	exec(sub, `INSERT INTO issues VALUES ('local', 'x')`)
	if events(sub, "local") != 1 {
		t.Fatalf("skip: a write on the subscriber by its own session wrote %d events, want 1", events(sub, "local"))
	}

	// Capture: the subscriber writes the replicated rows' events.
	install(sub, capture.SubscriberCapture)
	exec(pub, `UPDATE issues SET name = 'y' WHERE id = 'a'`)
	testenv.WaitFor(t, time.Minute, "the replicated update's event on the subscriber", func() bool {
		return count(sub, `SELECT count(*) FROM warren_outbox WHERE entity_id = 'a' AND event_type = 'issues.updated'`) == 1
	})
	if n := count(sub, `SELECT count(*) FROM issues WHERE name = 'y'`); n != 1 {
		t.Fatalf("capture: the replicated update is not on the subscriber (%d rows)", n)
	}
	if events(pub, "a") != 2 {
		t.Fatalf("the publisher wrote %d events for a, want 2", events(pub, "a"))
	}
}
