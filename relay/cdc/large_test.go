package cdc_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/relay/cdc"
)

// largeBatch is the batch size of the large-transaction tests: small, so
// that a transaction of a few thousand rows is many batches.
const largeBatch = 50

// perEndBound is the documented bound on what one session end makes the
// next session publish again (docs/cdc.md): the rows a relay has had
// confirmed and not yet trimmed, (BatchesInFlight + 1 + 2×SettleQueue)
// batches, whatever the size of the transaction they belong to.
func perEndBound(batch int) int {
	return (cdc.DefaultBatchesInFlight + 1 + 2*cdc.SettleQueue) * batch
}

// A transaction of 20 batches, its relay stopped gracefully each time
// another two batches of it are trimmed: the slot passes the transaction,
// every row arrives, and no stop costs more duplicates than the bound.
// Before the trim counted as progress every session published the
// transaction from its start again: the rows trimmed so far, duplicates,
// past the bound once the stops came late in the transaction.
func TestALargeTransactionSurvivesStoppedSessions(t *testing.T) {
	t.Parallel()
	n, every := 20*largeBatch, 2*largeBatch
	stoppedSessions(t, n, every, func(e *env, _ *cdc.Relay, left int) bool { return e.ob.Count("true") <= left-every })
}

// stoppedSessions commits n rows in one transaction and runs relays of
// BatchSize largeBatch on it one after another, stopping each gracefully
// once ended says so (left: the rows in the table when the session
// started), until the slot passes the transaction; it must within about
// n/every sessions.
func stoppedSessions(t *testing.T, n, every int, ended func(e *env, r *cdc.Relay, left int) bool) {
	e := newEnv(t)
	e.bindQueue()
	var sessions atomic.Int64
	led := consumeLedger(t, e.queue, sessions.Load)
	cfg := e.config()
	cfg.BatchSize = largeBatch
	r, stop := e.start(cfg)
	testenv.WaitFor(t, time.Minute, "the first relay to stream", r.Streaming)
	ids, past := commitLarge(t, e, "large", n)
	limit := 2*(n/every) + 3
	for {
		left := e.ob.Count("true")
		pollFor(t, 2*time.Minute, fmt.Sprintf("session %d to end, or the slot to pass the transaction", sessions.Load()), func() bool {
			return past() || ended(e, r, left)
		})
		if past() {
			break
		}
		stop()
		if sessions.Add(1) > int64(limit) {
			t.Fatalf("the slot did not pass a transaction of %d rows in %d sessions: %d rows still in the table",
				n, sessions.Load(), e.ob.Count("true"))
		}
		r, stop = e.start(cfg)
	}
	checkLarge(t, e, led, ids, sessions.Load())
}

// A transaction of 20 batches, its streaming relay killed with SIGKILL
// whenever it has trimmed two more batches of it: the slot passes the
// transaction, every row arrives, and each kill costs at most the bound.
// The relays are the real binary, one at a time.
func TestALargeTransactionSurvivesKilledRelays(t *testing.T) {
	t.Parallel()
	n, every := 20*largeBatch, 2*largeBatch
	bin := buildWarren(t)
	e := newEnv(t)
	e.bindQueue()
	g := newRelayGroup(t, e, bin)
	g.args[slices.Index(g.args, "--batch-size")+1] = strconv.Itoa(largeBatch)
	k := &killer{g: g}
	led := consumeLedger(t, e.queue, k.kills.Load)
	t.Cleanup(func() {
		if t.Failed() {
			g.printLogs()
		}
	})
	p := g.start(t)
	testenv.WaitFor(t, time.Minute, "the first relay to make the slot and backfill", func() bool { return backfilled(e) })
	ids, past := commitLarge(t, e, "killed", n)
	for left := e.ob.Count("true"); ; left = e.ob.Count("true") {
		pollFor(t, 2*time.Minute, fmt.Sprintf("relay %s to trim %d rows, or the slot to pass the transaction", p.name, every), func() bool {
			return past() || e.ob.Count("true") <= left-every
		})
		if past() {
			break
		}
		p.kill()
		if k.kills.Add(1) > int64(2*(n/every)+3) {
			t.Fatalf("the slot did not pass a transaction of %d rows in %d kills: %d rows still in the table", n, k.kills.Load(), e.ob.Count("true"))
		}
		p = g.start(t)
	}
	checkLarge(t, e, led, ids, k.kills.Load())
	g.checkExits(t)
}

// commitLarge commits n events in one transaction and returns their ids
// and a test of whether the slot's confirmed position has passed it.
func commitLarge(t *testing.T, e *env, prefix string, n int) ([]string, func() bool) {
	t.Helper()
	evs := make([]warren.Event, n)
	ids := make([]string, n)
	for i := range evs {
		evs[i] = testenv.OutboxEvent(fmt.Sprintf("%s-%d", prefix, i))
		ids[i] = evs[i].ID
	}
	e.ob.Publish(evs...)
	var mark string
	ctx := context.Background()
	if err := e.ob.Pool.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&mark); err != nil {
		t.Fatal(err)
	}
	return ids, func() bool {
		var past bool
		err := e.ob.Pool.QueryRow(ctx, `SELECT confirmed_flush_lsn >= $1::pg_lsn FROM pg_replication_slots WHERE slot_name = $2`, mark, e.slot).Scan(&past)
		return err == nil && past
	}
}

// checkLarge waits for every id and checks the duplicates that each of
// ends session ends caused (a duplicate counts for the last end before
// its arrival) against the bound.
func checkLarge(t *testing.T, e *env, led *ledger, ids []string, ends int64) {
	t.Helper()
	testenv.WaitFor(t, 2*time.Minute, fmt.Sprintf("all %d events", len(ids)), func() bool {
		return led.distinct() >= len(ids)
	})
	testenv.WaitFor(t, time.Minute, "the outbox table to be trimmed", func() bool { return e.ob.Count("true") == 0 })
	seen := map[string]bool{}
	dups := map[int64]int{}
	total := 0
	for _, a := range led.snapshot() {
		if seen[a.id] {
			dups[a.epoch]++
			total++
		}
		seen[a.id] = true
	}
	bound := perEndBound(largeBatch)
	t.Logf("%d events in one transaction, %d session ends, %d duplicates (per end: %v), bound %d per end", len(ids), ends, total, dups, bound)
	if dups[0] > 0 {
		t.Errorf("%d duplicates before the first session ended", dups[0])
	}
	for end, d := range dups {
		if d > bound {
			t.Errorf("%d duplicates after session end %d, more than the bound of %d", d, end, bound)
		}
	}
}

// pollFor is testenv.WaitFor polling every millisecond: a relay publishes
// a transaction of 20 batches in about 100 ms, and the sessions are to
// end within it.
func pollFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		<-tick.C
	}
}
