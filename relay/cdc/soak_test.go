//go:build slow

package cdc_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/relay/cdc"
)

// Events committed by 8 writers while the streaming relay is killed with
// SIGKILL every few seconds, and a standby takes over each time, are all
// published; the only duplicates are the events the killed relay had
// published beyond the position Postgres had heard of (counted, and
// bounded per kill); and each entity's events first arrive in the order
// they committed. The relays are the real binary, "warren relay run
// --mode cdc", two at a time on one slot.
func TestSoakKill9WhileWritingLosesNothing(t *testing.T) {
	t.Parallel()
	n := killEvents(t)
	began := time.Now()
	bin := buildWarren(t)
	e := newEnv(t)
	e.bindQueue()
	g := newRelayGroup(t, e, bin)
	k := &killer{g: g}
	led := consumeLedger(t, e.queue, k.kills.Load)
	var w written // once the writers are done
	t.Cleanup(func() {
		if t.Failed() {
			led.explain(t, w.committed)
			explainLeftovers(t, e, led)
			g.printLogs()
		}
	})

	// The first relay makes the slot and backfills (nothing) before
	// anything is written: an event written during the backfill would be
	// published by it and by the stream, a duplicate no kill caused.
	g.start(t)
	testenv.WaitFor(t, time.Minute, "the first relay to make the slot and backfill", func() bool { return backfilled(e) })
	g.start(t)
	e.ob.Publish(testenv.OutboxEvent("warmup"))
	testenv.WaitFor(t, time.Minute, "the warm-up event", func() bool { return led.received("warmup") })

	pool := writerPool(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stopKills := make(chan struct{})
	var killerErr error
	var kw sync.WaitGroup
	kw.Go(func() { killerErr = k.run(ctx, stopKills) })
	writeStart := time.Now()
	w, err := writeEvents(ctx, pool, e.ob.Table, n)
	writeTime := time.Since(writeStart)
	close(stopKills)
	kw.Wait()
	if err != nil {
		t.Fatalf("writers: %v", err)
	}
	if killerErr != nil {
		t.Fatalf("killer: %v", killerErr)
	}

	// The last relay is not killed: everything it publishes, the events
	// the last kill left unflushed among them, is on the one channel
	// before the sentinel, which commits last.
	e.ob.Publish(testenv.OutboxEvent("sentinel"))
	wait := time.Minute + time.Duration(n)*2*time.Millisecond
	testenv.WaitFor(t, wait, fmt.Sprintf("all %d committed events and the sentinel", n), func() bool {
		return led.received("sentinel") && led.distinct() >= n+2
	})
	g.checkExits(t)

	v := analyse(led.snapshot(), w.committed, 2*cdc.DefaultStatusInterval)
	kills := k.kills.Load()
	bound := dupBound()
	maxKill, maxDup := v.worstKill()
	byStandby := k.count(func(t takeover) bool { return t.byStandby })
	t.Logf("events %d (%d transactions, %d writers, %d entities) written in %v; kills %d (%d with a backlog of %d+ rows), takeovers %d (%d by the standby that was up, %d by its fresh replacement), longest takeover %v",
		n, w.transactions, killWriters, len(w.committed), writeTime.Round(time.Millisecond), kills, k.count(func(t takeover) bool { return t.busy }), busyRows,
		len(k.records()), byStandby, len(k.records())-byStandby, k.longestTakeover().Round(time.Millisecond))
	t.Logf("deliveries %d, duplicates %d (%d before the first kill), most after one kill %d (kill %d), bound per kill %d = (%d+1+2×%d)×%d (most deliveries in %v: %d); wall %v",
		v.deliveries, v.duplicates, v.dupByEpoch[0], maxDup, maxKill, bound, cdc.DefaultBatchesInFlight, cdc.SettleQueue, cdc.DefaultBatchSize, 2*cdc.DefaultStatusInterval, v.peak, time.Since(began).Round(time.Millisecond))

	if len(v.missing) > 0 {
		t.Errorf("%d of %d committed events never arrived, among them %v", len(v.missing), n, v.missing[:min(10, len(v.missing))])
	}
	if len(v.outOfOrder) > 0 {
		t.Errorf("%d events first arrived before an event of their entity that committed earlier, among them: %v", len(v.outOfOrder), v.outOfOrder[:min(10, len(v.outOfOrder))])
	}
	if len(k.records()) < minTakeovers {
		t.Errorf("%d takeovers during the writes, want at least %d", len(k.records()), minTakeovers)
	}
	if v.dupByEpoch[0] > 0 {
		t.Errorf("%d duplicates before the first kill: a relay that is not killed publishes each event once", v.dupByEpoch[0])
	}
	if v.duplicates > int(kills)*bound {
		t.Errorf("%d duplicates after %d kills, more than %d per kill that the unflushed window allows", v.duplicates, kills, bound)
	}
	testenv.WaitFor(t, time.Minute, "the outbox table to be trimmed", func() bool { return e.ob.Count("true") == 0 })
	checkOneSlot(t, e)
}

// A transaction of 30,000 rows (600 batches) whose sessions end sooner
// than it takes to publish: each relay is stopped once it has had 3,000
// events confirmed. The slot passes the transaction within a bounded
// number of sessions. Before, every session published the first 3,000
// rows again and was stopped, and the slot never passed (one graceful
// stop in such a transaction used to cost 15,100 duplicates).
func TestSoakAHugeTransactionSurvivesShortSessions(t *testing.T) {
	t.Parallel()
	stoppedSessions(t, 30000, 3000, func(_ *env, r *cdc.Relay, _ int) bool { return r.Published() >= 3000 })
}
