package cdc_test

// The kill test's relays: a group of warren processes, killed and
// taken over.

import (
	"context"
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

	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/relay/cdc"
)

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
