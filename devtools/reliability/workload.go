package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/examples/app"
)

// txStatus is what became of an application transaction.
type txStatus uint8

const (
	statusPending    txStatus = iota
	statusCommitted           // COMMIT returned success
	statusRolledBack          // rolled back on purpose
	statusFailed              // failed before COMMIT was sent: cannot have committed
	statusAmbiguous           // COMMIT returned an error: the ledger table decides
)

// eventRecord is one event the workload wrote, and what the consumers did
// with it.
type eventRecord struct {
	id, typ, entity, initiator string
	field, prev, value         string // the change (field empty for a create)
	txID                       int64
	probe                      bool
	status                     txStatus
	committedAt                time.Time
}

// qualifies reports whether the automation rule must fire for the event:
// a user's change of state to "done".
func (e *eventRecord) qualifies() bool {
	return e.typ == app.TypeStateUpdated && e.initiator == warren.InitiatorUser &&
		e.field == "state_id" && e.prev != e.value && e.value == ruleState
}

// The automation rule every run installs.
const (
	ruleState    = "done"
	rulePriority = "none"
)

// tracker follows every event from its commit to its effects, as the
// harness sees them while the run goes on (the final verdict re-reads
// everything from the services).
type tracker struct {
	mu        sync.Mutex
	events    map[string]*eventRecord
	webhookAt map[string]time.Time // first acceptance by the receiver
	autoAt    map[string]time.Time // first automation run seen
}

func newTracker() *tracker {
	return &tracker{events: map[string]*eventRecord{}, webhookAt: map[string]time.Time{}, autoAt: map[string]time.Time{}}
}

func (t *tracker) add(recs ...*eventRecord) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, r := range recs {
		t.events[r.id] = r
	}
}

func (t *tracker) settle(recs []*eventRecord, s txStatus, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, r := range recs {
		r.status = s
		if s == statusCommitted {
			r.committedAt = at
		}
	}
}

func (t *tracker) webhookSeen(id string, at time.Time) {
	t.mu.Lock()
	if _, ok := t.webhookAt[id]; !ok {
		t.webhookAt[id] = at
	}
	t.mu.Unlock()
}

func (t *tracker) autoSeen(id string, at time.Time) {
	t.mu.Lock()
	if _, ok := t.autoAt[id]; !ok {
		t.autoAt[id] = at
	}
	t.mu.Unlock()
}

// completeLocked reports whether a committed event has reached every
// effect it must have.
func (t *tracker) completeLocked(r *eventRecord) bool {
	if _, ok := t.webhookAt[r.id]; !ok {
		return false
	}
	if r.qualifies() {
		if _, ok := t.autoAt[r.id]; !ok {
			return false
		}
	}
	return true
}

// outstanding returns the committed events not yet at all their effects.
func (t *tracker) outstanding() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []string
	for id, r := range t.events {
		if r.status == statusCommitted && !t.completeLocked(r) {
			out = append(out, id)
		}
	}
	return out
}

// remaining filters ids to those still not complete.
func (t *tracker) remaining(ids []string) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []string
	for _, id := range ids {
		if r := t.events[id]; r != nil && !t.completeLocked(r) {
			out = append(out, id)
		}
	}
	return out
}

// complete reports whether one event reached all its effects.
func (t *tracker) complete(id string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.events[id]
	return r != nil && t.completeLocked(r)
}

// ledgerSchema is the harness's own record of committed events. Each
// application transaction inserts its events' rows here in the same
// transaction as the business change and the outbox row, so after the run
// the table says exactly which events committed, including those whose
// COMMIT answered with an error.
const ledgerSchema = `CREATE TABLE IF NOT EXISTS reliability_ledger (
	event_id       text PRIMARY KEY,
	tx_id          bigint NOT NULL,
	event_type     text NOT NULL,
	entity_id      text NOT NULL,
	initiator_type text NOT NULL,
	field          text NOT NULL,
	prev_value     text NOT NULL,
	new_value      text NOT NULL,
	probe          boolean NOT NULL,
	committed_at   timestamptz NOT NULL DEFAULT clock_timestamp())`

// step is one change inside an application transaction.
type step func(ctx context.Context, tx pgx.Tx) (warren.Event, *eventRecord, error)

// workload drives application transactions through examples/app.
type workload struct {
	pool    *pgxpool.Pool
	app     *app.App
	tracker *tracker
	run     string // prefix of every id, unique per run

	txSeq    atomic.Int64
	itemSeq  atomic.Int64
	counts   sync.Map // txStatus → *atomic.Int64, counted per transaction
	txErrors sync.Map // error text → *atomic.Int64

	// captureParts is how many partitions the captured table has (the
	// writes pick one); captureFailed counts captured writes that failed
	// before COMMIT (see capture.go).
	captureParts  atomic.Int32
	captureFailed atomic.Int64
}

var (
	userActor   = app.Actor{ID: "user-1", Type: warren.InitiatorUser}
	importActor = app.Actor{ID: "import-7", Type: warren.InitiatorSystemImport}
)

func (w *workload) count(s txStatus) {
	v, _ := w.counts.LoadOrStore(s, new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
}

func (w *workload) countOf(s txStatus) int64 {
	v, ok := w.counts.Load(s)
	if !ok {
		return 0
	}
	return v.(*atomic.Int64).Load()
}

func (w *workload) noteError(err error) {
	text := err.Error()
	if len(text) > 120 {
		text = text[:120]
	}
	v, _ := w.txErrors.LoadOrStore(text, new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
}

func create(it *item) step {
	return func(ctx context.Context, tx pgx.Tx) (warren.Event, *eventRecord, error) {
		ev, err := wlApp(ctx).Create(ctx, tx, userActor, app.WorkItem{
			ID: it.id, WorkspaceID: "ws-rel", ProjectID: "proj-rel", Name: "item " + it.id, StateID: "todo", Priority: "high",
		})
		return ev, &eventRecord{field: ""}, err
	}
}

func set(it *item, by app.Actor, field, value string) step {
	return func(ctx context.Context, tx pgx.Tx) (warren.Event, *eventRecord, error) {
		prev := it.state
		if field == "priority" {
			prev = it.priority
		}
		ev, err := wlApp(ctx).Set(ctx, tx, by, it.id, field, value)
		if err == nil && ev.ID == "" {
			err = fmt.Errorf("work item %s: %s is already %q (the workload's model is wrong)", it.id, field, value)
		}
		return ev, &eventRecord{field: field, prev: prev, value: value}, err
	}
}

type appKey struct{}

func wlApp(ctx context.Context) *app.App { return ctx.Value(appKey{}).(*app.App) }

// transact runs steps in one application transaction, records every event
// in the ledger table in the same transaction, and commits, or rolls back
// when rollback is set. It returns the transaction's status and its events.
func (w *workload) transact(ctx context.Context, steps []step, rollback, probe bool) (txStatus, []*eventRecord) {
	ctx = context.WithValue(ctx, appKey{}, w.app)
	txID := w.txSeq.Add(1)
	var recs []*eventRecord
	fail := func(err error) (txStatus, []*eventRecord) {
		w.noteError(err)
		w.tracker.settle(recs, statusFailed, time.Time{})
		w.count(statusFailed)
		return statusFailed, recs
	}
	tctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	tx, err := w.pool.Begin(tctx)
	if err != nil {
		return fail(err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	for _, s := range steps {
		ev, rec, err := s(tctx, tx)
		if err != nil {
			return fail(err)
		}
		rec.id, rec.typ, rec.entity, rec.initiator, rec.txID, rec.probe = ev.ID, ev.Type, ev.EntityID, ev.InitiatorType, txID, probe
		recs = append(recs, rec)
		w.tracker.add(rec)
		_, err = tx.Exec(tctx, `INSERT INTO reliability_ledger
			(event_id, tx_id, event_type, entity_id, initiator_type, field, prev_value, new_value, probe)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
			rec.id, txID, rec.typ, rec.entity, rec.initiator, rec.field, rec.prev, rec.value, probe)
		if err != nil {
			return fail(err)
		}
	}
	if rollback {
		if err := tx.Rollback(tctx); err != nil {
			// Nothing was committed either way.
			w.noteError(err)
		}
		w.tracker.settle(recs, statusRolledBack, time.Time{})
		w.count(statusRolledBack)
		return statusRolledBack, recs
	}
	if err := tx.Commit(tctx); err != nil {
		w.noteError(err)
		w.tracker.settle(recs, statusAmbiguous, time.Time{})
		w.count(statusAmbiguous)
		return statusAmbiguous, recs
	}
	w.tracker.settle(recs, statusCommitted, time.Now())
	w.count(statusCommitted)
	return statusCommitted, recs
}

// item is a work item in the workload's model. Each worker owns its items,
// so the model is exact as long as every transaction's outcome is known.
type item struct {
	id, kind, state, priority string
	step                      int
}

// itemKinds and their life cycles:
//
//	flow:    create → in_progress → done (the rule fires on done)
//	oneshot: create and done in one transaction (the rule fires)
//	import:  create → done by SYSTEM.IMPORT (the automation skips it)
//	tweak:   create → priority low → priority urgent → in_progress (no rule)
var itemKinds = []struct {
	name   string
	weight int
}{{"flow", 45}, {"oneshot", 10}, {"import", 15}, {"tweak", 30}}

// next returns the item's next transaction and the model change it makes.
func (it *item) next() (steps []step, apply func(), done bool) {
	switch it.kind + ":" + fmt.Sprint(it.step) {
	case "flow:0", "import:0", "tweak:0":
		return []step{create(it)}, func() {}, false
	case "oneshot:0":
		return []step{create(it), set(it, userActor, "state_id", ruleState)}, func() { it.state, it.priority = ruleState, rulePriority }, true
	case "flow:1":
		return []step{set(it, userActor, "state_id", "in_progress")}, func() { it.state = "in_progress" }, false
	case "flow:2":
		return []step{set(it, userActor, "state_id", ruleState)}, func() { it.state = ruleState }, true
	case "import:1":
		return []step{set(it, importActor, "state_id", ruleState)}, func() { it.state = ruleState }, true
	case "tweak:1":
		return []step{set(it, userActor, "priority", "low")}, func() { it.priority = "low" }, false
	case "tweak:2":
		return []step{set(it, userActor, "priority", "urgent")}, func() { it.priority = "urgent" }, false
	case "tweak:3":
		return []step{set(it, userActor, "state_id", "in_progress")}, func() { it.state = "in_progress" }, true
	}
	panic("reliability: item " + it.id + " has no step " + fmt.Sprint(it.step))
}

func (w *workload) newItem(rng *rand.Rand, kind string) *item {
	if kind == "" {
		n := rng.IntN(100)
		for _, k := range itemKinds {
			if n < k.weight {
				kind = k.name
				break
			}
			n -= k.weight
		}
	}
	return &item{id: fmt.Sprintf("%s-%s-%05d", w.run, kind, w.itemSeq.Add(1)), kind: kind, state: "todo", priority: "high"}
}

// runWorker issues transactions at rate per second until ctx ends. One
// transaction in rollbackEvery is rolled back on purpose.
func (w *workload) runWorker(ctx context.Context, seed uint64, rate float64, rollbackPct int) {
	rng := rand.New(rand.NewPCG(seed, seed*7+1))
	var active []*item
	tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if len(active) < 6 {
			active = append(active, w.newItem(rng, ""))
		}
		i := rng.IntN(len(active))
		it := active[i]
		steps, apply, last := it.next()
		rollback := rng.IntN(100) < rollbackPct
		status, _ := w.transact(ctx, steps, rollback, false)
		switch status {
		case statusCommitted:
			apply()
			it.step++
			if last {
				active = append(active[:i], active[i+1:]...)
			}
		case statusAmbiguous:
			// The item's state is unknown until the ledger is read: leave
			// it alone from now on.
			active = append(active[:i], active[i+1:]...)
		}
	}
}

// probe commits one event the automation rule fires on (a new item created
// and done in one transaction), retrying until a transaction commits, and
// returns the done event's id.
func (w *workload) probe(ctx context.Context) (string, time.Time, error) {
	for {
		it := w.newItem(nil, "probe")
		it.kind = "oneshot"
		status, recs := w.transact(ctx, []step{create(it), set(it, userActor, "state_id", ruleState)}, false, true)
		if status == statusCommitted {
			return recs[1].id, recs[1].committedAt, nil
		}
		if status == statusAmbiguous {
			var n int
			// The ledger answers whether the ambiguous commit happened.
			err := w.pool.QueryRow(ctx, `SELECT count(*) FROM reliability_ledger WHERE event_id = $1`, recs[1].id).Scan(&n)
			if err == nil && n == 1 {
				return recs[1].id, time.Now(), nil
			}
		}
		select {
		case <-ctx.Done():
			return "", time.Time{}, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// pollRuns follows the automation's runs table and tells the tracker of
// every run as it appears. Runs are stamped with their transaction's start
// (now()), which precedes their commit by at most the handler timeout, so a
// window reaching well before the last poll sees every row.
func pollRuns(ctx context.Context, pool *pgxpool.Pool, t *tracker) {
	last := time.Now().Add(-time.Hour)
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(250 * time.Millisecond):
		}
		start := time.Now()
		rows, err := pool.Query(ctx, `SELECT event_id, ran_at FROM automation_runs WHERE ran_at > $1`, last.Add(-2*time.Minute))
		if err != nil {
			continue
		}
		var id string
		var ranAt time.Time
		_, err = pgx.ForEachRow(rows, []any{&id, &ranAt}, func() error {
			t.autoSeen(id, ranAt)
			return nil
		})
		if err == nil {
			last = start
		}
	}
}
