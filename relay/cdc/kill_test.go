package cdc_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
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

// relayGroup is the relay processes of one slot: the real binary, started
// and killed by the test.
type relayGroup struct {
	t      *testing.T
	bin    string
	args   []string
	env    []string
	slot   string
	table  string
	prefix string
	pool   *pgxpool.Pool

	mu    sync.Mutex
	procs []*relayProc
}

// relayProc is one "warren relay run --mode cdc" process.
type relayProc struct {
	name   string
	cmd    *exec.Cmd
	log    lockedBuffer // its stderr and stdout
	killed atomic.Bool  // by the test: its end is expected
	exited chan struct{}
}

// buildWarren builds cmd/warren, the binary operators run.
func buildWarren(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "warren")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/warrenmq/warren/cmd/warren")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/warren: %v\n%s", err, out)
	}
	return bin
}

// newRelayGroup prepares relays of bin on e's table, exchange and slot.
// Its cleanup ends them before e's cleanup drops the slot (cleanups run
// last registered first).
func newRelayGroup(t *testing.T, e *env, bin string) *relayGroup {
	t.Helper()
	g := &relayGroup{t: t, bin: bin, slot: e.slot, table: e.ob.Table.Name(), pool: e.ob.Pool, prefix: testenv.Name(t, "r"),
		args: []string{"relay", "run", "--mode", "cdc", "--table", e.ob.Table.Name(), "--exchange", e.exchange,
			"--slot", e.slot, "--batch-size", strconv.Itoa(cdc.DefaultBatchSize)},
		env: append(os.Environ(), "DATABASE_URL="+testenv.DatabaseURL(t), "AMQP_URL="+testenv.AMQPURL(t)),
	}
	t.Cleanup(g.stopAll)
	return g
}

// start starts one more relay, with a name of its own: its replication
// connection's application_name, by which holder finds it.
func (g *relayGroup) start(t *testing.T) *relayProc {
	t.Helper()
	p, err := g.spawn()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func (g *relayGroup) spawn() (*relayProc, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	p := &relayProc{name: fmt.Sprintf("%s_%d", g.prefix, len(g.procs)+1), exited: make(chan struct{})}
	p.cmd = exec.Command(g.bin, append(slices.Clone(g.args), "--name", p.name)...)
	p.cmd.Env = g.env
	p.cmd.Stdout, p.cmd.Stderr = &p.log, &p.log
	// A test process that dies takes its relays with it.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", p.name, err)
	}
	go func() {
		p.cmd.Wait()
		close(p.exited)
	}()
	g.procs = append(g.procs, p)
	return p, nil
}

// live returns the processes that have not ended.
func (g *relayGroup) live() []*relayProc {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []*relayProc
	for _, p := range g.procs {
		select {
		case <-p.exited:
		default:
			out = append(out, p)
		}
	}
	return out
}

func (g *relayGroup) byName(name string) *relayProc {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, p := range g.procs {
		if p.name == name {
			return p
		}
	}
	return nil
}

// waitBusy polls, for up to busyWait, until the table holds busyRows rows
// (read from the stream and not yet trimmed: the relay's backlog), and
// reports whether it did. Not synchronisation: it aims the kill at a
// moment with events in every stage, and a kill goes ahead without it.
func (g *relayGroup) waitBusy(ctx context.Context) (bool, error) {
	deadline := time.Now().Add(busyWait)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for time.Now().Before(deadline) {
		var busy bool
		err := g.pool.QueryRow(ctx, `SELECT count(*) >= $1 FROM (SELECT FROM `+pgx.Identifier{g.table}.Sanitize()+` LIMIT $1) AS r`, busyRows).Scan(&busy)
		if err != nil || busy {
			return busy, err
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-tick.C:
		}
	}
	return false, nil
}

// holding is the relay that streams the slot: its walsender's pid and
// its name.
type holding struct {
	pid  int32
	name string
}

// holder asks Postgres which connection streams the slot; ok is false
// when none does.
func (g *relayGroup) holder(ctx context.Context) (h holding, ok bool, err error) {
	err = g.pool.QueryRow(ctx, `SELECT s.active_pid, coalesce(a.application_name, '')
		FROM pg_replication_slots s LEFT JOIN pg_stat_activity a ON a.pid = s.active_pid
		WHERE s.slot_name = $1 AND s.active`, g.slot).Scan(&h.pid, &h.name)
	if errors.Is(err, pgx.ErrNoRows) {
		return h, false, nil
	}
	return h, err == nil, err
}

// waitHolder polls until a walsender other than notPID streams the slot.
func (g *relayGroup) waitHolder(ctx context.Context, notPID int32) (holding, error) {
	deadline := time.Now().Add(takeoverTimeout)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		h, ok, err := g.holder(ctx)
		switch {
		case err != nil:
			return h, err
		case ok && h.pid != notPID:
			return h, nil
		case time.Now().After(deadline):
			return h, fmt.Errorf("no relay streamed the slot for %v: the standby is stuck", takeoverTimeout)
		}
		select {
		case <-ctx.Done():
			return h, ctx.Err()
		case <-tick.C:
		}
	}
}

// kill sends SIGKILL to the process, by its pid, and waits for its end.
func (p *relayProc) kill() {
	p.killed.Store(true)
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}

// stopAll ends the processes still running: SIGTERM, so that their
// walsenders let go of the slot at once, then SIGKILL for one that does
// not stop within 15s.
func (g *relayGroup) stopAll() {
	for _, p := range g.live() {
		p.killed.Store(true)
		p.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range g.live() {
		select {
		case <-p.exited:
		case <-time.After(15 * time.Second):
			g.t.Errorf("relay %s did not stop within 15s of SIGTERM", p.name)
			p.kill()
		}
	}
}

// checkExits fails t for every relay that ended without being killed.
func (g *relayGroup) checkExits(t *testing.T) {
	t.Helper()
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, p := range g.procs {
		select {
		case <-p.exited:
			if !p.killed.Load() {
				t.Errorf("relay %s exited by itself: %v", p.name, p.cmd.ProcessState)
			}
		default:
		}
	}
}

// printLogs prints every relay's output, for a failed test.
func (g *relayGroup) printLogs() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, p := range g.procs {
		g.t.Logf("relay %s (killed by the test: %v) said:\n%s", p.name, p.killed.Load(), p.log.String())
	}
}

// killer kills the streaming relay every 2-4s and starts a fresh one in
// its place, which stands by.
type killer struct {
	g     *relayGroup
	kills atomic.Int64

	mu   sync.Mutex
	done []takeover
}

// takeover is what followed one kill.
type takeover struct {
	killed, by string
	byStandby  bool // the relay that took over stood by before the kill, not the fresh one
	busy       bool // the killed relay had busyRows rows to publish or settle
	after      time.Duration
}

// run kills until stop is closed, and returns the first failure: a slot
// that no relay takes over (a stuck standby) among them.
func (k *killer) run(ctx context.Context, stop <-chan struct{}) error {
	rng := rand.New(rand.NewPCG(killSeed, 0))
	for {
		// Fault pacing, not synchronisation: how long a relay streams
		// before it dies.
		pause := 2*time.Second + time.Duration(rng.Int64N(int64(2*time.Second)))
		select {
		case <-stop:
			return nil
		case <-time.After(pause):
		}
		busy, err := k.g.waitBusy(ctx)
		if err != nil {
			return err
		}
		h, err := k.g.waitHolder(ctx, 0)
		if err != nil {
			return err
		}
		p := k.g.byName(h.name)
		if p == nil {
			return fmt.Errorf("the slot is streamed by %q, not by one of the test's relays", h.name)
		}
		killedAt := time.Now()
		p.kill()
		k.kills.Add(1)
		fresh, err := k.g.spawn()
		if err != nil {
			return err
		}
		next, err := k.g.waitHolder(ctx, h.pid)
		if err != nil {
			return fmt.Errorf("after kill %d (of %s): %w", k.kills.Load(), p.name, err)
		}
		k.mu.Lock()
		k.done = append(k.done, takeover{killed: p.name, by: next.name, byStandby: next.name != fresh.name, busy: busy, after: time.Since(killedAt)})
		k.mu.Unlock()
	}
}

func (k *killer) records() []takeover {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.done)
}

// count returns how many takeovers f holds for.
func (k *killer) count(f func(takeover) bool) int {
	n := 0
	for _, t := range k.records() {
		if f(t) {
			n++
		}
	}
	return n
}

func (k *killer) longestTakeover() time.Duration {
	var d time.Duration
	for _, t := range k.records() {
		d = max(d, t.after)
	}
	return d
}

// ledger is every delivery of the test's queue, in arrival order: the
// consumer auto-acks, so the ledger is the only record.
type ledger struct {
	mu       sync.Mutex
	count    map[string]int
	arrivals []arrival
}

// arrival is one delivery.
type arrival struct {
	id    string
	at    time.Time
	epoch int64 // kills before it arrived
}

// consumeLedger consumes queue into a ledger until the test ends; kills
// says how many kills came before each delivery.
func consumeLedger(t *testing.T, queue string, kills func() int64) *ledger {
	t.Helper()
	ch := testenv.Channel(t)
	deliveries, err := ch.Consume(queue, "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	l := &ledger{count: map[string]int{}}
	var wg sync.WaitGroup
	wg.Go(func() {
		for d := range deliveries {
			l.mu.Lock()
			l.count[d.MessageId]++
			l.arrivals = append(l.arrivals, arrival{id: d.MessageId, at: time.Now(), epoch: kills()})
			l.mu.Unlock()
		}
	})
	t.Cleanup(func() {
		ch.Close()
		wg.Wait()
	})
	return l
}

func (l *ledger) received(id string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.count[id] > 0
}

// history says after how many kills each delivery of id arrived.
func (l *ledger) history(id string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, a := range l.arrivals {
		if a.id == id {
			out = append(out, strconv.FormatInt(a.epoch, 10))
		}
	}
	return fmt.Sprint(out)
}

func (l *ledger) distinct() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.count)
}

func (l *ledger) snapshot() []arrival {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.arrivals)
}

// explain logs what is missing, for a failed test; committed is nil when
// the writers did not finish.
func (l *ledger) explain(t *testing.T, committed []int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	missing := missingIDs(committed, func(id string) bool { return l.count[id] > 0 })
	t.Logf("ledger: %d deliveries of %d distinct ids; %d committed events missing, among them %v",
		len(l.arrivals), len(l.count), len(missing), missing[:min(20, len(missing))])
}

// verdict is what the ledger shows.
type verdict struct {
	deliveries, duplicates int
	dupByEpoch             map[int64]int // duplicates that arrived after that many kills
	missing                []string
	outOfOrder             []string
	peak                   int // the most deliveries within one window
}

// analyse reads the arrivals against what committed: every event must
// have arrived, and each entity's first arrivals must have strictly
// increasing sequence numbers (its commit order).
func analyse(arrivals []arrival, committed []int, window time.Duration) verdict {
	v := verdict{deliveries: len(arrivals), dupByEpoch: map[int64]int{}}
	seen := map[string]bool{}
	lastSeq := make([]int, len(committed))
	for _, a := range arrivals {
		if seen[a.id] {
			v.duplicates++
			v.dupByEpoch[a.epoch]++
			continue
		}
		seen[a.id] = true
		entity, seq, ok := entitySeq(a.id)
		if !ok || entity >= len(committed) {
			continue
		}
		if seq <= lastSeq[entity] {
			v.outOfOrder = append(v.outOfOrder, fmt.Sprintf("%s after seq %d", a.id, lastSeq[entity]))
		}
		lastSeq[entity] = max(lastSeq[entity], seq)
	}
	v.missing = missingIDs(committed, func(id string) bool { return seen[id] })
	// Arrivals are in time order: the widest run within window.
	for lo, hi := 0, 0; hi < len(arrivals); hi++ {
		for arrivals[hi].at.Sub(arrivals[lo].at) > window {
			lo++
		}
		v.peak = max(v.peak, hi-lo+1)
	}
	return v
}

// missingIDs returns the ids of the committed events that did not arrive.
func missingIDs(committed []int, arrived func(id string) bool) []string {
	var out []string
	for entity, last := range committed {
		for seq := 1; seq <= last; seq++ {
			if id := killEvent(entity, seq).ID; !arrived(id) {
				out = append(out, id)
			}
		}
	}
	return out
}

// worstKill returns the kill after which the most duplicates arrived
// (a duplicate counts for the last kill before its arrival; the next
// relay publishes the killed one's window again soon after it takes over,
// well before the next kill), and how many.
func (v verdict) worstKill() (kill int64, dups int) {
	for epoch, n := range v.dupByEpoch {
		if epoch > 0 && n > dups {
			kill, dups = epoch, n
		}
	}
	return kill, dups
}

// lockedBuffer is a bytes.Buffer that a process's output and the test
// may use at once.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
