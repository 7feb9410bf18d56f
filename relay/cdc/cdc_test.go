package cdc_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/relay/cdc"
)

// The relay publishes every committed event in commit order, trims the
// table behind the broker's confirms, and moves the slot on.
func TestStreamsCommittedEventsInCommitOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.bindQueue()
	r, _ := e.start(e.config())
	testenv.WaitFor(t, 30*time.Second, "the relay to stream", r.Streaming)

	// Two transactions interleaved: the one that commits first is
	// published first, whatever the order of their ids.
	ctx := context.Background()
	first, err := e.ob.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Rollback(ctx)
	if _, err := e.ob.Table.Publish(ctx, first, testenv.OutboxEvent("late-commit")); err != nil {
		t.Fatal(err)
	}
	e.ob.Publish(testenv.OutboxEvent("early-commit-1"), testenv.OutboxEvent("early-commit-2"))
	if err := first.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	want := append([]string{"early-commit-1", "early-commit-2", "late-commit"}, e.ob.PublishN("bulk", 1500)...)
	// Then a trickle, one event a transaction: batches that hold only a
	// transaction's end, its rows taken by the batch before, come among
	// batches still in flight.
	for i := range 100 {
		ev := testenv.OutboxEvent(fmt.Sprintf("trickle-%d", i))
		e.ob.Publish(ev)
		want = append(want, ev.ID)
	}
	got := e.receive(want, time.Minute)
	if fmt.Sprint(got[:len(want)]) != fmt.Sprint(want) {
		t.Errorf("published out of commit order: got %v…, want %v…", got[:5], want[:5])
	}
	// One session did it all: nothing here is a reason to start again.
	if h := r.Health(); h.LastError != "" {
		t.Errorf("a session ended: %s", h.LastError)
	}
	testenv.WaitFor(t, 30*time.Second, "the table to be trimmed", func() bool { return e.ob.Count("true") == 0 })
	testenv.WaitFor(t, 30*time.Second, "the slot to move past the events", func() bool {
		s, err := cdc.Status(ctx, e.ob.Pool, e.ob.Table.Name(), e.slot)
		return err == nil && s.Active && s.LagBytes < 1<<20
	})
}

// A relay that stops resumes from the confirmed position: events committed
// while no relay ran are published by the next one, and nothing before
// the position is published again. The stop waits for the slot's position
// to pass the first events, not only for their rows to be trimmed: a row
// trimmed before the slot's position is reported past it comes again in
// the next session's stream, and a relay stopped in between publishes it
// again (the duplicate every death may cost, docs/cdc.md).
func TestResumesFromTheConfirmedPosition(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.bindQueue()
	r, stop := e.start(e.config())
	testenv.WaitFor(t, 30*time.Second, "the relay to stream", r.Streaming)
	before := e.ob.PublishN("before", 200)
	var mark string
	ctx := context.Background()
	if err := e.ob.Pool.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&mark); err != nil {
		t.Fatal(err)
	}
	e.receive(before, time.Minute)
	testenv.WaitFor(t, 30*time.Second, "the table to be trimmed", func() bool { return e.ob.Count("true") == 0 })
	testenv.WaitFor(t, 30*time.Second, "the slot's position to pass the events", func() bool {
		var past bool
		err := e.ob.Pool.QueryRow(ctx, `SELECT confirmed_flush_lsn >= $1::pg_lsn FROM pg_replication_slots WHERE slot_name = $2`, mark, e.slot).Scan(&past)
		return err == nil && past
	})
	stop()

	during := e.ob.PublishN("while-stopped", 300)
	if n := e.ob.Count("state = 'pending'"); n != 300 {
		t.Fatalf("%d rows pending while no relay runs, want 300", n)
	}
	e.start(e.config())
	got := e.receive(during, time.Minute)
	for _, id := range got {
		if len(id) > 6 && id[:7] == "before-" {
			t.Errorf("event %s, confirmed and trimmed before the stop, was published again", id)
		}
	}
	testenv.WaitFor(t, 30*time.Second, "the table to be trimmed", func() bool { return e.ob.Count("true") == 0 })
}

// Rows written before the slot existed are not in its stream; the first
// relay of a group publishes them from the table.
func TestPublishesRowsWrittenBeforeTheSlot(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.bindQueue()
	old := e.ob.PublishN("before-slot", 1200)
	r, _ := e.start(e.config())
	e.receive(old, time.Minute)
	testenv.WaitFor(t, 30*time.Second, "the table to be trimmed", func() bool { return e.ob.Count("true") == 0 })
	// And the stream goes on after the backfill.
	e.receive(e.ob.PublishN("after-slot", 10), time.Minute)
	// The counter moves on the broker's confirm, which can come a moment
	// after the consumer got the message.
	testenv.WaitFor(t, 30*time.Second, "the relay to count 1210 published events", func() bool { return r.Published() >= 1210 })
}

// Rows that commit after the slot exists and before the backfill reads
// the table are in both: the backfill publishes them, and the stream,
// which follows, does not publish them again. The slot and publication
// are made before the relay starts, as a relay that died just after
// creating them leaves them, so every row is in both.
func TestBackfilledRowsAreNotPublishedAgainFromTheStream(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.bindQueue()
	e.ob.Exec(`CREATE PUBLICATION ` + pgx.Identifier{e.slot}.Sanitize() + ` FOR TABLE {table} WITH (publish = 'insert, update')`)
	e.ob.Exec(`SELECT pg_create_logical_replication_slot('` + e.slot + `', 'pgoutput')`)
	both := e.ob.PublishN("both", 300)
	var highest int64
	if err := e.ob.Pool.QueryRow(context.Background(), `SELECT max(id) FROM `+pgx.Identifier{e.ob.Table.Name()}.Sanitize()).Scan(&highest); err != nil {
		t.Fatal(err)
	}
	e.start(e.config())
	testenv.WaitFor(t, 30*time.Second, "the backfill to be recorded", func() bool {
		var done bool
		err := e.ob.Pool.QueryRow(context.Background(), `SELECT backfilled_at IS NOT NULL FROM `+pgx.Identifier{e.slot}.Sanitize()).Scan(&done)
		return err == nil && done
	})
	// The bound covering them was recorded, for later sessions.
	var bound int64
	if err := e.ob.Pool.QueryRow(context.Background(), `SELECT backfilled_to FROM `+pgx.Identifier{e.slot}.Sanitize()).Scan(&bound); err != nil {
		t.Fatal(err)
	}
	if bound < highest {
		t.Errorf("backfilled_to = %d, want at least %d, the highest id the backfill read", bound, highest)
	}
	// Committed after the backfill, so streamed after the rows it covered:
	// once it arrives, any second copy of them has arrived before it.
	e.ob.Publish(testenv.OutboxEvent("sentinel"))
	noneTwice(t, e.receive(append(both, "sentinel"), time.Minute))
}

// A relay that dies after a new slot's backfill and before its stream has
// passed the rows the two share leaves them in the slot's stream, trimmed
// from the table; the next session must not publish the stream's copies.
// The first session is written by hand, as the relay writes it (the bound
// recorded, the rows published and trimmed, the backfill recorded), so the
// second session meets every shared row.
func TestALaterSessionDoesNotPublishTheBackfilledRowsAgain(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.bindQueue()
	e.ob.Exec(`CREATE PUBLICATION ` + pgx.Identifier{e.slot}.Sanitize() + ` FOR TABLE {table} WITH (publish = 'insert, update')`)
	e.ob.Exec(`SELECT pg_create_logical_replication_slot('` + e.slot + `', 'pgoutput')`)
	e.ob.PublishN("backfilled", 200)
	state := pgx.Identifier{e.slot}.Sanitize()
	e.ob.Exec(`CREATE TABLE ` + state + ` (slot text PRIMARY KEY, created_at timestamptz NOT NULL DEFAULT now(),
		backfilled_at timestamptz, backfilled_to bigint NOT NULL DEFAULT 0)`)
	e.ob.Exec(`INSERT INTO ` + state + ` SELECT '` + e.slot + `', now(), now(), max(id) FROM {table}`)
	e.ob.Exec(`DELETE FROM {table}`)
	e.start(e.config())
	after := e.ob.PublishN("after", 20)
	got := e.receive(after, time.Minute)
	noneTwice(t, got)
	for _, id := range got {
		if strings.HasPrefix(id, "backfilled") {
			t.Fatalf("event %s, published and trimmed by the backfill, was published again from the stream", id)
		}
	}
}

// A state table made before backfilled_to existed gets the column, and the
// relay streams.
func TestStateTableOfAnEarlierVersionIsUpgraded(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.bindQueue()
	state := pgx.Identifier{e.slot}.Sanitize()
	e.ob.Exec(`CREATE TABLE ` + state + ` (slot text PRIMARY KEY, created_at timestamptz NOT NULL DEFAULT now(), backfilled_at timestamptz)`)
	pending := e.ob.PublishN("pending", 5)
	var highest int64
	if err := e.ob.Pool.QueryRow(context.Background(), `SELECT max(id) FROM `+pgx.Identifier{e.ob.Table.Name()}.Sanitize()).Scan(&highest); err != nil {
		t.Fatal(err)
	}
	r, _ := e.start(e.config())
	testenv.WaitFor(t, 30*time.Second, "the relay to stream", r.Streaming)
	noneTwice(t, e.receive(append(pending, e.ob.PublishN("streamed", 5)...), time.Minute))
	var bound int64
	if err := e.ob.Pool.QueryRow(context.Background(), `SELECT backfilled_to FROM `+state).Scan(&bound); err != nil {
		t.Fatalf("read backfilled_to: %v", err)
	}
	if bound < highest {
		t.Errorf("backfilled_to = %d, want at least %d, the highest id backfilled", bound, highest)
	}
}

// noneTwice fails the test for each event received more than once.
func noneTwice(t *testing.T, got []string) {
	t.Helper()
	seen := map[string]int{}
	for _, id := range got {
		if seen[id]++; seen[id] == 2 {
			t.Errorf("event %s published twice", id)
		}
	}
}

// One relay streams the slot; another stands by and takes over when the
// first stops, without a second slot.
func TestStandbyTakesOverTheSlot(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.bindQueue()
	a, stopA := e.start(e.config())
	testenv.WaitFor(t, 30*time.Second, "the first relay to stream", a.Streaming)
	b, _ := e.start(e.config())
	e.receive(e.ob.PublishN("to-a", 50), time.Minute)
	if b.Streaming() || b.Published() != 0 {
		t.Fatalf("the standby streams (%v) or published %d events while the first relay holds the slot", b.Streaming(), b.Published())
	}
	stopA()
	testenv.WaitFor(t, 30*time.Second, "the standby to take over", b.Streaming)
	e.receive(e.ob.PublishN("to-b", 50), time.Minute)
	var slots int
	if err := e.ob.Pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE $1`, e.ob.Table.Name()+"%").Scan(&slots); err != nil {
		t.Fatal(err)
	}
	if slots != 1 {
		t.Errorf("%d slots for the table, want 1", slots)
	}
}
