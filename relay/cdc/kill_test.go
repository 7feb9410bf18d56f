package cdc_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/outbox"
	"github.com/warrenmq/warren/relay/cdc"
)

// The kill -9 proof's shape. N is WARREN_CDC_KILL_EVENTS, default
// defaultKillEvents so that the normal suite stays short on CI's two busy
// cores; `make cdc-kill` runs 100000.
const (
	killEventsEnv     = "WARREN_CDC_KILL_EVENTS"
	defaultKillEvents = 20000
	killWriters       = 8
	entitiesPerWriter = 16
	maxTxnEvents      = 10
	// writeRate paces the writers (all together, events/s) so that the
	// kills land while they commit: at the default N the writes last
	// about 30s, room for several kills at one every 2-4s. They write in
	// a burst each burstPeriod, as producers do, so that the relay has a
	// backlog for part of each period: the moments (events read, not yet
	// published or settled) where a kill finds what the design must get
	// right. At an even rate it would be idle at almost every kill.
	writeRate    = 700
	burstPeriod  = time.Second
	minTakeovers = 3
	// busyRows is how many rows in the table (published or not, none yet
	// trimmed) make the relay busy enough to kill; the killer waits up to
	// busyWait for that after its pause, then kills anyway.
	busyRows = 100
	busyWait = 2 * burstPeriod
	// takeoverTimeout is how long a kill may leave the slot unstreamed
	// before the standby counts as stuck. The design takes over within
	// about StandbyRetry (1s); the rest is room for a busy machine.
	takeoverTimeout = time.Minute
	killSeed        = 18 // issue 18
)

// explainLeftovers logs, for a failed test, the rows still in the outbox
// table and when their events arrived: a row whose event arrived is one
// the slot moved past untrimmed.
func explainLeftovers(t *testing.T, e *env, led *ledger) {
	rows, err := e.ob.Pool.Query(context.Background(), `SELECT id, event_id, state FROM `+pgx.Identifier{e.ob.Table.Name()}.Sanitize()+` ORDER BY id LIMIT 40`)
	if err != nil {
		t.Logf("read the rows left: %v", err)
		return
	}
	var left []string
	for rows.Next() {
		var id int64
		var event, state string
		if err := rows.Scan(&id, &event, &state); err != nil {
			t.Logf("read the rows left: %v", err)
			return
		}
		left = append(left, fmt.Sprintf("%d:%s:%s:%s", id, event, state, led.history(event)))
	}
	t.Logf("%d rows still in the outbox table, the first 40 as id:event:state:[kills before each delivery]: %v", e.ob.Count("true"), left)
}

func killEvents(t *testing.T) int {
	t.Helper()
	s := os.Getenv(killEventsEnv)
	if s == "" {
		return defaultKillEvents
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive number of events", killEventsEnv, s)
	}
	return n
}

// dupBound is the most events one kill may make the next relay publish
// again: those the killed relay had published and not yet settled, the
// BatchesInFlight published and not yet handed to the settle loop,
// SettleQueue waiting for it, and the one being committed, which merges
// up to SettleQueue more (perEndBound). What it settled beyond the
// position Postgres last heard of (the status updates of the last 2×
// StatusInterval, lost with the kill; the first rows of a transaction
// whose commit the position had not reached) is streamed again too, but
// read from the table, where it is trimmed: those used to be counted
// here as well, the most deliveries in 2×StatusInterval and a
// transaction's size less one.
func dupBound() int { return perEndBound(cdc.DefaultBatchSize) }

// backfilled reports whether a relay has published the rows written
// before e's slot existed, as its state table records.
func backfilled(e *env) bool {
	var done bool
	err := e.ob.Pool.QueryRow(context.Background(), `SELECT backfilled_at IS NOT NULL FROM `+
		pgx.Identifier{e.ob.Table.Name() + "_cdc"}.Sanitize()+` WHERE slot = $1`, e.slot).Scan(&done)
	return err == nil && done
}

// checkOneSlot asserts that the group has one slot: takeovers reuse it.
func checkOneSlot(t *testing.T, e *env) {
	t.Helper()
	ctx := context.Background()
	table := e.ob.Table.Name()
	var slots int
	if err := e.ob.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_replication_slots WHERE starts_with(slot_name, $1)`, table).Scan(&slots); err != nil {
		t.Fatal(err)
	}
	recorded, err := cdc.Slots(ctx, e.ob.Pool, table)
	if err != nil {
		t.Fatal(err)
	}
	if slots != 1 || len(recorded) != 1 || recorded[0].Slot != e.slot || recorded[0].WALStatus == "dropped" {
		t.Errorf("%d slots for the table, recorded %+v; want the one slot %s", slots, recorded, e.slot)
	}
}

// writerPool is a pool with a connection for each writer: the test's
// default pool has fewer, and the writers would take turns.
func writerPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(testenv.DatabaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = killWriters + 2
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// written is what the writers committed.
type written struct {
	// committed is the last committed sequence number of every entity:
	// entity e's events are its numbers 1 to committed[e], committed in
	// that order.
	committed    []int
	transactions int
}

// writeEvents commits n events from killWriters writers, each in
// transactions of 1 to maxTxnEvents events on entities of its own.
func writeEvents(ctx context.Context, pool *pgxpool.Pool, table *outbox.Table, n int) (written, error) {
	committed := make([]int, killWriters*entitiesPerWriter)
	txns := make([]int, killWriters)
	errs := make([]error, killWriters)
	var wg sync.WaitGroup
	for w := range killWriters {
		share := n / killWriters
		if w < n%killWriters {
			share++
		}
		// Each writer touches only its own entities' entries.
		mine := committed[w*entitiesPerWriter : (w+1)*entitiesPerWriter]
		wg.Go(func() { txns[w], errs[w] = writer(ctx, pool, table, w, share, mine) })
	}
	wg.Wait()
	total := 0
	for _, x := range txns {
		total += x
	}
	return written{committed: committed, transactions: total}, errors.Join(errs...)
}

// writer commits share events on its entities, paced to its part of
// writeRate, recording in last each entity's sequence number once the
// transaction that carries it has committed. It returns how many
// transactions it committed.
func writer(ctx context.Context, pool *pgxpool.Pool, table *outbox.Table, w, share int, last []int) (txns int, err error) {
	rng := rand.New(rand.NewPCG(killSeed, uint64(w)))
	seq := make([]int, len(last))
	start := time.Now()
	for done := 0; done < share; txns++ {
		size := min(1+rng.IntN(maxTxnEvents), share-done)
		evs := make([]warren.Event, size)
		for i := range evs {
			local := rng.IntN(len(last))
			seq[local]++
			evs[i] = killEvent(w*entitiesPerWriter+local, seq[local])
		}
		if err := commit(ctx, pool, table, evs); err != nil {
			return txns, fmt.Errorf("writer %d: %w", w, err)
		}
		copy(last, seq)
		done += size
		// Pacing, not synchronisation: a burst each burstPeriod, spread
		// over the time the kills take.
		perBurst := writeRate * burstPeriod.Seconds() / killWriters
		due := start.Add(time.Duration(float64(done)/perBurst) * burstPeriod)
		if err := sleepUntil(ctx, due); err != nil {
			return txns, err
		}
	}
	return txns, nil
}

func commit(ctx context.Context, pool *pgxpool.Pool, table *outbox.Table, evs []warren.Event) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := table.PublishBatch(ctx, tx, evs)
		return err
	})
}

// killEvent is entity's event number seq; both are in its id, which
// entitySeq reads back.
func killEvent(entity, seq int) warren.Event {
	ev := testenv.OutboxEvent(fmt.Sprintf("e%d-%d", entity, seq))
	ev.EntityID = fmt.Sprintf("entity-%d", entity)
	ev.Payload = warren.Payload{Data: json.RawMessage(fmt.Sprintf(`{"seq":%d}`, seq))}
	return ev
}

// entitySeq reads an id made by killEvent; ok is false for other ids (the
// warm-up and the sentinel).
func entitySeq(id string) (entity, seq int, ok bool) {
	_, err := fmt.Sscanf(id, "e%d-%d", &entity, &seq)
	return entity, seq, err == nil
}

func sleepUntil(ctx context.Context, due time.Time) error {
	d := time.Until(due)
	if d <= 0 {
		return nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}
