package relay_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/outbox"
	"github.com/warrenmq/warren/relay"
	"github.com/warrenmq/warren/relay/internal/relaytest"
)

// The outbox row commits or rolls back with the business change.
func TestRolledBackTransactionPublishesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.bindQueue()
	got := consume(t, e.queue)
	business := testenv.Name(t, "biz")
	testenv.DropTables(t, business)
	e.exec(fmt.Sprintf(`CREATE TABLE %q (id text PRIMARY KEY)`, business))
	e.start(e.config(testenv.Name(t, "relay")))

	ctx := context.Background()
	write := func(id string, commit bool) {
		tx, err := e.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		if _, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %q VALUES ($1)`, business), id); err != nil {
			t.Fatal(err)
		}
		if _, err := e.outbox.Publish(ctx, tx, event(id)); err != nil {
			t.Fatal(err)
		}
		if commit {
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	write("rolled-back", false)
	write("committed", true)
	got.waitDistinct(t, 1, 60*time.Second)
	if !got.has("committed") {
		t.Fatal("the committed event did not arrive")
	}
	if n := e.count("event_id = 'rolled-back'"); n != 0 {
		t.Fatalf("the rolled-back event left %d rows", n)
	}
	// Nothing else can arrive later: the committed row is settled and the
	// table is empty.
	testenv.WaitFor(t, 60*time.Second, "an empty outbox", func() bool { return e.count("true") == 0 })
	if got.distinct() != 1 || got.has("rolled-back") {
		t.Fatalf("received %v", got.deliveries())
	}
}

// Three relays on one table deliver every one of 10,000 events, each
// once: the claims never overlap, so an event arrives twice only after a
// publish of it got no confirm (on a busy machine, a confirm slower than
// PublishTimeout) and its row was published again. The Observer hears
// every publish's verdict, so each duplicate must be matched by a failed
// one; counting claims would not do, since a row released with its
// attempt given back (a blocked publish) may be published again without
// spending an attempt.
func TestThreeRelaysDeliverEveryEventOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.bindQueue()
	got := consume(t, e.queue)
	var connected counter
	var obs relaytest.Recorder
	claimedBy := make([]counter, 3)
	for i := range 3 {
		cfg := e.config(testenv.Name(t, fmt.Sprintf("relay%d", i)))
		cfg.Lease, cfg.Observer = 2*time.Minute, &obs // no lease lapses: only failed publishes are retried
		e.start(cfg, func(r *relay.Relay) {
			relay.SetConnectedHook(r, connected.hook())
			relay.SetAfterClaimHook(r, func(rows []outbox.Row) { claimedBy[i].n.Add(int64(len(rows))) })
		})
	}
	testenv.WaitFor(t, 60*time.Second, "three relays connected", func() bool { return connected.value() == 3 })

	start := time.Now()
	ids := e.publishN("ev", 10000)
	got.waitDistinct(t, len(ids), 5*time.Minute)
	elapsed := time.Since(start)
	testenv.WaitFor(t, 60*time.Second, "an empty outbox", func() bool { return e.count("true") == 0 })
	dups := got.requireOnly(t, ids)
	if failed := obs.Counts().Failures; dups > failed {
		t.Errorf("%d duplicates but only %d failed publishes: rows were published twice without a retry", dups, failed)
	} else if dups > 0 {
		t.Logf("%d duplicates, after %d failed publishes", dups, failed)
	}
	for i := range claimedBy {
		if claimedBy[i].value() == 0 {
			t.Errorf("relay %d claimed nothing: the relays did not share the work", i)
		}
	}
	t.Logf("10000 events written and relayed by 3 relays in %v; claimed per relay: %d, %d, %d",
		elapsed.Round(time.Millisecond), claimedBy[0].value(), claimedBy[1].value(), claimedBy[2].value())
}

// A relay that hangs after claiming holds its rows only until the lease
// lapses; then another relay delivers them.
func TestHungRelayRowsAreTakenOverAfterLease(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.bindQueue()
	got := consume(t, e.queue)
	ids := e.publishN("ev", 40)

	held := newHold(t)
	hung := e.config(testenv.Name(t, "hung"))
	// Short, but the claim (bounded by Lease/2) must fit in it.
	hung.Lease, hung.PublishTimeout, hung.Workers = 3*time.Second, time.Second, 1
	e.start(hung, held.install)
	rows := held.wait()
	if len(rows) != len(ids) {
		t.Fatalf("the hung relay claimed %d rows, want %d", len(rows), len(ids))
	}
	e.takeOver(got, ids)
	// The lease's end is the database's time, on this machine's clock.
	leaseEnd := rows[0].AvailableAt
	for _, r := range rows {
		leaseEnd = earliest(leaseEnd, r.AvailableAt)
	}
	for _, id := range ids {
		if at, _ := got.receivedAt(id); at.Before(leaseEnd) {
			t.Errorf("event %s arrived at %v, before the hung relay's lease ended at %v", id, at, leaseEnd)
		}
	}
}

func earliest(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// A relay process killed with SIGKILL right after its claim committed:
// after the lease, another relay delivers every claimed row.
func TestRelayKilledAfterClaim(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.bindQueue()
	got := consume(t, e.queue)
	ids := e.publishN("ev", 300)

	childName := testenv.Name(t, "child")
	child := startChild(t, childSpec{
		DatabaseURL: testenv.DatabaseURL(t), AMQPURL: testenv.AMQPURL(t),
		Exchange: e.exchange, Table: e.table, Name: childName, Lease: 5 * time.Second, // its claim must fit in Lease/2
	})
	if line := child.next(); line != fmt.Sprintf("claimed %d", len(ids)) {
		child.kill()
		t.Fatalf("child said %q", line)
	}
	child.kill() // SIGKILL: no cleanup, no release
	if n := e.count("claimed_by = $1 AND attempts = 1 AND state = 'pending'", childName); n != len(ids) {
		t.Fatalf("%d rows are leased to the dead relay, want %d", n, len(ids))
	}
	if got.distinct() != 0 {
		t.Fatal("the child published before it was killed")
	}

	e.takeOver(got, ids)
}

// A stop right after a claim publishes nothing and hands the rows back at
// once, without spending their attempt: the next relay does not wait for
// the lease.
func TestGracefulStopReleasesUnpublishedClaims(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.bindQueue()
	got := consume(t, e.queue)
	ids := e.publishN("ev", 50)

	held := newHold(t)
	cfg := e.config(testenv.Name(t, "stopping"))
	cfg.Lease, cfg.Workers = time.Hour, 1
	run := e.start(cfg, held.install)
	held.wait()
	run.cancel()
	held.release()
	if err := run.stop(); err != nil {
		t.Fatalf("Run after a stop: %v", err)
	}
	if n := e.count("state = 'pending' AND attempts = 0 AND claimed_by IS NULL AND available_at <= now()"); n != len(ids) {
		t.Fatalf("%d of %d rows were released", n, len(ids))
	}
	if got.distinct() != 0 {
		t.Fatal("a stopping relay published after its context ended")
	}
	e.takeOver(got, ids) // at once, not after a lease
}

// Stopping in the middle of a stream leaves nothing half done: every row
// is either settled after its confirm or released, so the next relay
// delivers the rest and nothing arrives twice.
func TestGracefulStopUnderLoad(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.bindQueue()
	got := consume(t, e.queue)
	ids := e.publishN("ev", 3000)
	cfg := e.config(testenv.Name(t, "first"))
	cfg.BatchSize, cfg.Lease = 50, time.Hour
	run := e.start(cfg)
	got.waitDistinct(t, 300, 60*time.Second)
	if err := run.stop(); err != nil {
		t.Fatal(err)
	}
	if n := e.count("claimed_by IS NOT NULL OR attempts <> 0"); n != 0 {
		t.Fatalf("%d rows are still leased or charged an attempt after a graceful stop", n)
	}
	left := e.count("true")
	if left == 0 {
		t.Fatal("the relay finished everything before the stop; the test proves nothing")
	}
	e.takeOver(got, ids)
	t.Logf("stopped with %d of %d rows left", left, len(ids))
}

// A relay that stalls past its lease and then settles must not overwrite
// what the relay that reclaimed the rows decides, whether its own publish
// failed or succeeded.
func TestStaleRelayCannotOverwriteReclaimedRows(t *testing.T) {
	t.Parallel()
	for _, staleSucceeds := range []bool{false, true} {
		t.Run(fmt.Sprintf("stale publish succeeds=%v", staleSucceeds), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.bindQueue()
			got := consume(t, e.queue)
			ids := e.publishN("ev", 20)

			staleHeld := newHold(t)
			var staleSettled counter
			stale := e.config(testenv.Name(t, "stale"))
			// Short, but the claim (bounded by Lease/2) must fit in it.
			stale.Lease, stale.PublishTimeout, stale.Workers = 3*time.Second, time.Second, 1
			stale.MaxAttempts, stale.KeepDelivered = 1, true // an unfenced failure would make the rows dead
			if !staleSucceeds {
				stale.Exchange = testenv.Name(t, "unbound") // no queue: every publish is returned
				testenv.CleanupExchanges(t, stale.Exchange)
			}
			e.start(stale, staleHeld.install, func(r *relay.Relay) { relay.SetAfterSettleHook(r, staleSettled.hook()) })
			staleHeld.wait()

			freshHeld := newHold(t)
			fresh := e.config(testenv.Name(t, "fresh"))
			fresh.Workers, fresh.KeepDelivered = 1, true
			e.start(fresh, freshHeld.install)
			freshHeld.wait() // the rows are now leased to fresh, claims = 2

			type state struct {
				State, ClaimedBy string
				Attempts         int
				Claims           int64
				Available        time.Time
			}
			snapshot := func() map[string]state {
				rows, err := e.pool.Query(context.Background(), fmt.Sprintf(
					`SELECT event_id, state, coalesce(claimed_by, ''), attempts, claims, available_at FROM %q`, e.table))
				if err != nil {
					t.Fatal(err)
				}
				defer rows.Close()
				out := map[string]state{}
				for rows.Next() {
					var id string
					var s state
					if err := rows.Scan(&id, &s.State, &s.ClaimedBy, &s.Attempts, &s.Claims, &s.Available); err != nil {
						t.Fatal(err)
					}
					out[id] = s
				}
				return out
			}
			before := snapshot()
			for id, s := range before {
				if s.ClaimedBy != fresh.Name || s.Claims != 2 || s.State != "pending" {
					t.Fatalf("row %s is %+v, want claimed by %s with claims 2", id, s, fresh.Name)
				}
			}
			staleHeld.release()
			staleSettled.waitAbove(t, 0, "the stale relay to settle")
			if after := snapshot(); !mapsEqual(before, after) {
				t.Fatalf("the stale relay's settle changed rows it no longer held:\nbefore %v\nafter  %v", before, after)
			}
			freshHeld.release()
			testenv.WaitFor(t, 60*time.Second, "all rows delivered", func() bool { return e.count("state = 'delivered'") == len(ids) })
			got.waitDistinct(t, len(ids), 60*time.Second)
			if n := e.count("last_error IS NOT NULL"); n != 0 {
				t.Errorf("%d rows carry the stale relay's error", n)
			}
		})
	}
}

func mapsEqual[K comparable, V comparable](a, b map[K]V) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}
