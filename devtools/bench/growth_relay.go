package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/warrenmq/warren/outbox"
	"github.com/warrenmq/warren/relay"
)

var relaysDim = &growthDimension{
	name: "relays", title: "Relays on one table", axis: "relays (raw: loops, as many as the relays' claim loops)",
	about: fmt.Sprintf("The relay scenario's backlog of -messages rows in one table, drained by several relays at once: warren runs that "+
		"many `relay.Run` instances at their defaults, each with a Name, an AMQP connection and (beyond the first) a Postgres pool "+
		"of its own, as separate processes would have; each runs %[2]d claim–publish–settle loops (Workers). Raw runs as many of the "+
		"relay scenario's claim %[1]d / publish / confirm / delete loops as the relays run in all (%[2]d per relay), each on a "+
		"connection of its own, so that both sides put the same number of claimers on the table: compared with one raw loop per "+
		"relay, the raw side's gain from a second loop is the overlap warren has at one relay already. `FOR UPDATE SKIP LOCKED` "+
		"gives every claim rows no other holds, so what grows is contention: for the index's head, for Postgres's and the broker's "+
		"CPU (two cores here), and the claims that come back with fewer rows as the table empties.", rawClaimBatch, relay.DefaultWorkers),
}

func relayCountScenarios() []scenario {
	var out []scenario
	for _, n := range []int{1, 2, 4} {
		out = append(out, growthScenario(growthPoint{dim: relaysDim, x: fmt.Sprint(n)}, nil, nil,
			variant{name: fmt.Sprintf("raw: %d loops", n*relay.DefaultWorkers), run: rawRelays(n * relay.DefaultWorkers)},
			variant{name: fmt.Sprintf("warren: %d relay.Run instances", n), run: warrenRelays(n, nil)}))
	}
	return out
}

// warrenRelays drains a backlog with n relay.Run instances at their
// defaults, as tweak changes them.
func warrenRelays(n int, tweak func(*relay.Config)) runFunc {
	return func(ctx context.Context, e *env) (figures, error) {
		ob, err := filledOutbox(ctx, e, e.messages)
		if err != nil {
			return nil, err
		}
		defer ob.close()
		elapsed, err := drainWithRelays(ctx, e, ob, n, e.messages, tweak)
		if err != nil {
			return nil, err
		}
		return rate(e.messages, elapsed), nil
	}
}

// drainWithRelays runs n relay.Run instances on ob's table, which holds
// rows pending rows, until none is pending, and returns how long that
// took. The relays count their confirmed publishes, so watching them
// costs an atomic load until every row has been confirmed once; only then
// is Postgres asked whether the last batch has been settled, so that the
// clock stops where the raw loop's does, after its last delete. (Asking
// Postgres every 5 ms from the start cost the relays a fifth of the CPU
// they share with it.)
func drainWithRelays(ctx context.Context, e *env, ob *outboxBench, n, rows int, tweak func(*relay.Config)) (time.Duration, error) {
	var confirmed publishCounter
	observed := func(c *relay.Config) {
		c.Observer = &confirmed
		c.StatsInterval = -1 // counting publishes: no table statistics inside the measurement
		if tweak != nil {
			tweak(c)
		}
	}
	return runRelays(ctx, e, ob, n, observed, func(ctx context.Context) (bool, error) {
		if confirmed.Load() < int64(rows) {
			return false, nil
		}
		more, err := ob.pending(ctx)
		return !more, err
	})
}

// runRelays runs n relay.Run instances on ob's table until done says
// their work is done, and returns how long that took. Each relay has a
// Name and an AMQP connection of its own, and beyond the first a Postgres
// pool of its own: n processes would.
func runRelays(ctx context.Context, e *env, ob *outboxBench, n int, tweak func(*relay.Config), done func(context.Context) (bool, error)) (time.Duration, error) {
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	relays := make([]*relay.Relay, n)
	for i := range relays {
		pool, name := ob.pool, "warren-bench-relay"
		if i > 0 {
			var err error
			if pool, err = pgPool(ctx, e); err != nil {
				return 0, err
			}
			defer pool.Close()
		}
		if n > 1 {
			name = fmt.Sprintf("%s-%d", name, i+1)
		}
		cfg := relay.Config{Pool: pool, AMQPURL: e.amqpURL, Exchange: ob.exchange, Table: ob.outbox.Name(), Name: name, Logger: discardLogger}
		if tweak != nil {
			tweak(&cfg)
		}
		var err error
		if relays[i], err = relay.New(cfg); err != nil {
			return 0, err
		}
	}
	errc := make(chan error, n)
	begin := time.Now()
	for _, r := range relays {
		go func() { errc <- r.Run(runCtx) }()
	}
	// A relay has no "work done" signal; a look every 5ms costs it at
	// most that much of a run of seconds.
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-errc:
			return 0, fmt.Errorf("relay stopped: %v", err)
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-tick.C:
		}
		finished, err := done(ctx)
		if err != nil {
			return 0, err
		}
		if finished {
			break
		}
	}
	elapsed := time.Since(begin)
	stop()
	for range n {
		if err := <-errc; err != nil {
			return 0, err
		}
	}
	return elapsed, nil
}

// rawRelays drains a backlog with this many raw loops at once.
func rawRelays(loops int) runFunc {
	return func(ctx context.Context, e *env) (figures, error) {
		ob, err := filledOutbox(ctx, e, e.messages)
		if err != nil {
			return nil, err
		}
		defer ob.close()
		elapsed, err := drainRaw(ctx, e, ob, loops, 0)
		if err != nil {
			return nil, err
		}
		return rate(e.messages, elapsed), nil
	}
}

// drainRaw runs this many raw loops on ob's table at once, each claiming
// until a claim finds nothing or, with a limit, until the loops have moved
// that many rows between them, and returns how long that took.
func drainRaw(ctx context.Context, e *env, ob *outboxBench, loops, limit int) (time.Duration, error) {
	ls := make([]*rawRelayLoop, loops)
	for i := range ls {
		l, err := newRawRelayLoop(ctx, e, ob)
		if err != nil {
			return 0, err
		}
		defer l.close()
		ls[i] = l
	}
	var moved atomic.Int64
	errs := make(chan error, loops)
	var wg sync.WaitGroup
	begin := time.Now()
	for _, l := range ls {
		wg.Go(func() {
			for limit == 0 || moved.Load() < int64(limit) {
				n, err := l.cycle(ctx, rawClaimBatch)
				if err != nil {
					errs <- err
					return
				}
				if n == 0 {
					return
				}
				moved.Add(int64(n))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(begin)
	close(errs)
	if err := <-errs; err != nil {
		return 0, err
	}
	if limit > 0 && moved.Load() < int64(limit) {
		return 0, fmt.Errorf("the raw loops moved %d rows, want %d", moved.Load(), limit)
	}
	return elapsed, nil
}

var backlogDim = &growthDimension{
	name: "backlog", title: "Outbox backlog", axis: "pending rows",
	about: fmt.Sprintf("The relay draining the first rows of a table that holds a backlog: -messages rows (at most %d, every row of "+
		"the smallest backlog), with the relay scenario's raw loop and `relay.Run` at its defaults. The table is filled once per "+
		"run with `INSERT … SELECT generate_series` in the row shape `outbox.PublishBatch` writes (the 1M rows take a minute or two "+
		"on two busy cores); between measurements the rows drained are written again (new event ids, at the table's end) and the "+
		"table vacuumed and analysed, so every measurement starts from the same backlog with no dead rows. Claim p99 is the 99th "+
		"percentile of the claim statement's time as pgx sees it, from sending it to reading its last row (the raw loop reads its "+
		"claim whole before publishing, as relay.Run does); with %d-row claims a measurement has about %d of them, so it is their "+
		"slowest. The two claims do not commit alike: the raw claim is an autocommit UPDATE that waits for its WAL flush, relay.Run's "+
		"runs with synchronous_commit off (a lost claim only lapses), so compare each side's growth from 10k to 1M, not the two "+
		"sides' claim times. Throughput also differs in where it stops: the raw loop's clock stops after its last delete, warren's "+
		"at the last publish confirm, before its settle. What could grow with the backlog is the claim: its index scan on (available_at, id) of pending rows, the "+
		"planner's choices on a large table, and the dead index entries the drain leaves at the head of that index.",
		backlogDrainMax, rawClaimBatch, backlogDrainMax/rawClaimBatch),
}

// backlogDrainMax bounds the rows one backlog measurement drains: all of
// the smallest backlog.
const backlogDrainMax = 10000

func backlogScenarios() []scenario {
	metrics := []metric{throughput, {name: "claim p99 ms", lowerBetter: true}}
	var out []scenario
	for _, b := range []struct {
		label string
		rows  int
	}{{"10k", 10000}, {"1M", 1000000}} {
		t := &backlogTable{rows: b.rows, tracer: &claimTracer{}}
		size := func(e *env) string {
			return fmt.Sprintf("%d of %d pending rows", backlogDrain(e), b.rows)
		}
		s := growthScenario(growthPoint{dim: backlogDim, x: b.label}, metrics, size,
			variant{name: "raw: claim 500, publish, confirm, delete", run: t.measure(rawBacklogSide)},
			variant{name: "warren: relay.Run defaults", run: t.measure(warrenBacklogSide)})
		s.done = t.close
		out = append(out, s)
	}
	return out
}

func backlogDrain(e *env) int { return min(e.messages, backlogDrainMax) }

// backlogSide drains limit rows of ob's table and returns how long that
// took.
type backlogSide func(ctx context.Context, e *env, ob *outboxBench, limit int) (time.Duration, error)

func rawBacklogSide(ctx context.Context, e *env, ob *outboxBench, limit int) (time.Duration, error) {
	return drainRaw(ctx, e, ob, 1, limit)
}

func warrenBacklogSide(ctx context.Context, e *env, ob *outboxBench, limit int) (time.Duration, error) {
	var confirmed publishCounter
	observe := func(c *relay.Config) {
		c.Observer = &confirmed
		c.StatsInterval = -1 // counting publishes: no table statistics inside the measurement
	}
	done := func(context.Context) (bool, error) { return confirmed.Load() >= int64(limit), nil }
	return runRelays(ctx, e, ob, 1, observe, done)
}

// publishCounter is a relay.Observer that counts confirmed publishes:
// the relay's progress through a table too large to count rows in.
type publishCounter struct{ atomic.Int64 }

func (c *publishCounter) Published(_ string, p relay.Publication) {
	if p.Err == nil {
		c.Add(1)
	}
}
func (*publishCounter) Woken(string, bool)               {}
func (*publishCounter) Dead(string, int)                 {}
func (*publishCounter) OutboxStats(string, outbox.Stats) {}

// backlogTable is an outbox table holding rows pending rows, shared by
// the rounds and variants of one backlog point, with a tracer on its pool
// timing the claims.
type backlogTable struct {
	rows   int
	tracer *claimTracer
	ob     *outboxBench
	refill int // how many times drained rows were written again
}

// measure is one measurement of side on the table.
func (t *backlogTable) measure(side backlogSide) runFunc {
	return func(ctx context.Context, e *env) (figures, error) {
		traced := *e
		traced.pgTracer = t.tracer
		if err := t.ready(ctx, &traced); err != nil {
			return nil, err
		}
		limit := backlogDrain(e)
		t.tracer.take() // the preparation's statements are not the measurement's
		elapsed, err := side(ctx, &traced, t.ob, limit)
		if err != nil {
			return nil, err
		}
		claims := t.tracer.take()
		if len(claims) == 0 {
			return nil, fmt.Errorf("no claim was traced")
		}
		return figures{float64(limit) / elapsed.Seconds(), percentile(claims, 0.99)}, nil
	}
}

// ready makes the table hold t.rows pending rows, vacuumed and analysed:
// made and filled the first time, the rows drained since written again
// later.
func (t *backlogTable) ready(ctx context.Context, e *env) error {
	missing := t.rows
	if t.ob == nil {
		ob, err := newOutboxBench(ctx, e, 1000)
		if err != nil {
			return err
		}
		t.ob = ob
	} else {
		var pending int
		if err := t.ob.pool.QueryRow(ctx, `SELECT count(*) FROM `+t.ob.table()+` WHERE state = 'pending'`).Scan(&pending); err != nil {
			return err
		}
		missing = t.rows - pending
		t.refill++
	}
	if missing > 0 {
		if _, err := t.ob.pool.Exec(ctx, backlogInsertSQL(t.ob.table()), backlogInsertArgs(t.refill, missing)...); err != nil {
			return fmt.Errorf("fill the backlog: %w", err)
		}
	}
	_, err := t.ob.pool.Exec(ctx, `VACUUM (ANALYZE) `+t.ob.table())
	return err
}

func (t *backlogTable) close() {
	if t.ob != nil {
		t.ob.close()
		t.ob = nil
	}
}

// backlogInsertSQL writes $12 rows of sampleEvent's shape in one
// statement, with event ids $1 followed by the row's number in 12 digits,
// as outbox.PublishBatch would write sampleEvent(0 … $12-1) with refill 0
// (backlog_test.go checks that row for row). No NOTIFY: the relay claims
// at its start anyway.
func backlogInsertSQL(table string) string {
	return `INSERT INTO ` + table + ` (event_id, event_type, entity_type, entity_id, workspace_id, project_id,
	initiator_id, initiator_type, payload, version, created_at)
SELECT $1 || lpad(g::text, 12, '0'), $2, $3, $4, $5, $6, $7, $8, $9::jsonb, $10, $11
FROM generate_series(0, $12::bigint - 1) AS g
ORDER BY g`
}

// backlogInsertArgs are backlogInsertSQL's arguments for n rows: refill 0
// gives sampleEvent's own ids, a refill ids no earlier one used.
func backlogInsertArgs(refill, n int) []any {
	ev := sampleEvent(0)
	payload, err := ev.Payload.MarshalJSON()
	if err != nil {
		panic(err) // sampleEvent's payload encodes
	}
	prefix := strings.TrimSuffix(ev.ID, "000000000000")
	if refill > 0 {
		prefix = strings.Replace(prefix, "-0000-", fmt.Sprintf("-%04d-", refill), 1)
	}
	return []any{prefix, ev.Type, ev.EntityType, ev.EntityID, ev.WorkspaceID, ev.ProjectID, ev.InitiatorID, ev.InitiatorType,
		string(payload), ev.Version, ev.CreatedAt, n}
}

// claimTracer times the claim statements of the pools it traces (those
// that lock with SKIP LOCKED): from sending one to having read its last
// row, as pgx sees it. relay.Run sends its claim in a batch (with its
// synchronous_commit setting), the raw loop as a query; both are timed.
type claimTracer struct {
	mu   sync.Mutex
	took []float64 // milliseconds
}

type claimStartKey struct{}

func isClaim(sql string) bool { return strings.Contains(sql, "SKIP LOCKED") }

func claimStarted(ctx context.Context) context.Context {
	return context.WithValue(ctx, claimStartKey{}, time.Now())
}

func (t *claimTracer) ended(ctx context.Context, err error) {
	start, ok := ctx.Value(claimStartKey{}).(time.Time)
	if !ok || err != nil {
		return
	}
	t.mu.Lock()
	t.took = append(t.took, float64(time.Since(start))/float64(time.Millisecond))
	t.mu.Unlock()
}

// take returns the claims' times so far, sorted, and forgets them.
func (t *claimTracer) take() []float64 {
	t.mu.Lock()
	took := t.took
	t.took = nil
	t.mu.Unlock()
	slices.Sort(took)
	return took
}

func (t *claimTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if isClaim(d.SQL) {
		return claimStarted(ctx)
	}
	return ctx
}

func (t *claimTracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryEndData) {
	t.ended(ctx, d.Err)
}

func (t *claimTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	if d.Batch != nil && slices.ContainsFunc(d.Batch.QueuedQueries, func(q *pgx.QueuedQuery) bool { return isClaim(q.SQL) }) {
		return claimStarted(ctx)
	}
	return ctx
}

func (*claimTracer) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

func (t *claimTracer) TraceBatchEnd(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchEndData) {
	t.ended(ctx, d.Err)
}

var (
	_ pgx.QueryTracer = (*claimTracer)(nil)
	_ pgx.BatchTracer = (*claimTracer)(nil)
	_ relay.Observer  = (*publishCounter)(nil)
)
