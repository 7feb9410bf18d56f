package relay_test

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/internal/testenv/localrabbit"
	"github.com/warrenmq/warren/outbox"
	"github.com/warrenmq/warren/relay"
)

// childEnv, when set, makes the test binary a relay that claims a batch
// and then hangs, to be killed with SIGKILL by TestRelayKilledAfterClaim.
const childEnv = "WARREN_RELAY_TEST_CHILD"

func TestMain(m *testing.M) {
	if spec := os.Getenv(childEnv); spec != "" {
		os.Exit(runChild(spec))
	}
	code := m.Run()
	localrabbit.StopShared()
	os.Exit(code)
}

type childSpec struct {
	DatabaseURL, AMQPURL, Exchange, Table, Name string
	Lease                                       time.Duration
	Schema                                      outbox.Schema
	// KeepGoing makes the child say each claim and go on publishing,
	// instead of hanging after its first.
	KeepGoing bool
	BatchSize int
}

func runChild(spec string) int {
	var s childSpec
	if err := json.Unmarshal([]byte(spec), &s); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	r, err := relay.New(relay.Config{
		DatabaseURL: s.DatabaseURL, AMQPURL: s.AMQPURL, Exchange: s.Exchange, Table: s.Table, Name: s.Name,
		Lease: s.Lease, PublishTimeout: s.Lease / 2, Workers: 1, BatchSize: cmp.Or(s.BatchSize, 1000), Schema: s.Schema,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, nil)),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	relay.SetAfterClaimHook(r, func(rows []outbox.Row) {
		fmt.Printf("claimed %d\n", len(rows))
		if !s.KeepGoing {
			time.Sleep(time.Hour) // hang holding the claim until the parent kills us
		}
	})
	if err := r.Run(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// child is a relay running in a process of its own (runChild), to be
// killed with SIGKILL.
type child struct {
	t      *testing.T
	cmd    *exec.Cmd
	lines  chan string
	stderr strings.Builder
}

func startChild(t *testing.T, spec childSpec) *child {
	t.Helper()
	js, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	c := &child{t: t, cmd: exec.Command(os.Args[0], "-test.run=^$"), lines: make(chan string, 100)}
	c.cmd.Env = append(os.Environ(), childEnv+"="+string(js))
	c.cmd.Stderr = &c.stderr
	stdout, err := c.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { // ends when the child's stdout closes, at its death
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		close(c.lines)
	}()
	t.Cleanup(c.kill)
	return c
}

// next returns the child's next line of output.
func (c *child) next() string {
	c.t.Helper()
	select {
	case line, ok := <-c.lines:
		if !ok {
			c.t.Fatalf("the child relay died; its log:\n%s", c.stderr.String())
		}
		return line
	case <-time.After(60 * time.Second):
		c.kill()
		c.t.Fatalf("the child relay said nothing for 60s; its log:\n%s", c.stderr.String())
		return ""
	}
}

// kill sends SIGKILL, which leaves no time for cleanup or a release, and
// waits for the child's end.
func (c *child) kill() {
	if c.cmd.ProcessState != nil {
		return
	}
	c.cmd.Process.Kill()
	c.cmd.Wait()
	for range c.lines {
	}
}

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
	var obs recordingObserver
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
	if failed := obs.snapshot().failures; dups > failed {
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

// The broker or Postgres drops the relay's connections again and again
// while events are written: the relay reconnects, every event arrives, and
// every row marked delivered was confirmed (it is in the queue).
func TestConnectionsLostWhileEventsFlow(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		// back installs the hook that signals a reconnect.
		back func(*relay.Relay, func())
		// cut drops the connections whose name contains the relay's.
		cut func(testing.TB, string) int
	}{
		{"broker closes the connection", relay.SetConnectedHook, testenv.CloseConnections},
		{"postgres terminates the backends", relay.SetListeningHook, testenv.TerminateBackends},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.bindQueue()
			got := consume(t, e.queue)
			name := testenv.Name(t, "relay")
			var reconnected counter
			cfg := e.config(name)
			cfg.KeepDelivered = true
			e.start(cfg, func(r *relay.Relay) { c.back(r, reconnected.hook()) })
			reconnected.waitAbove(t, 0, "the relay to connect")

			prod := e.startProducer("ev", 10, 10*time.Millisecond)
			for range 3 {
				was := reconnected.value()
				if n := c.cut(t, name); n == 0 {
					t.Fatalf("found no connection named %s to drop", name)
				}
				reconnected.waitAbove(t, was, "the relay to reconnect")
			}
			ids := prod.finish()
			e.requireDelivered(got, ids)
			t.Logf("%d events, %d messages received across 3 connection losses", len(ids), len(got.deliveries()))
		})
	}
}

// The broker goes away for a while (a proxy in front of it drops and
// refuses connections): rows wait in the table, nothing is marked
// delivered, and everything arrives once it is back.
func TestBrokerOutageRowsWait(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.bindQueue()
	got := consume(t, e.queue)
	brokerURL := testenv.AMQPURL(t)
	p := testenv.StartProxy(t, hostOf(t, brokerURL))
	var connected counter
	cfg := e.config(testenv.Name(t, "relay"))
	cfg.AMQPURL, cfg.KeepDelivered = p.URL(t, brokerURL), true
	e.start(cfg, func(r *relay.Relay) { relay.SetConnectedHook(r, connected.hook()) })
	connected.waitAbove(t, 0, "the relay to connect")

	before := e.publishN("before", 100)
	got.waitDistinct(t, len(before), 60*time.Second)

	p.SetUp(false)
	during := e.publishN("during", 200)
	refused := p.Refused()
	testenv.WaitFor(t, 60*time.Second, "two refused reconnects", func() bool { return p.Refused() >= refused+2 })
	if n := e.count("event_id LIKE 'during-%' AND state = 'pending'"); n != len(during) {
		t.Fatalf("%d of %d rows written during the outage are pending", n, len(during))
	}
	if got.distinct() != len(before) {
		t.Fatalf("%d events arrived during the outage", got.distinct()-len(before))
	}

	p.SetUp(true)
	e.requireDelivered(got, append(before, during...))
}

// A broker that stops answering: publishes that get no confirm within
// PublishTimeout are failures, not deliveries; once it answers again every
// event is delivered.
func TestPublishTimeoutIsAFailure(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.bindQueue()
	got := consume(t, e.queue)
	brokerURL := testenv.AMQPURL(t)
	p := testenv.StartProxy(t, hostOf(t, brokerURL))
	var connected counter
	cfg := e.config(testenv.Name(t, "relay"))
	cfg.AMQPURL, cfg.KeepDelivered, cfg.MaxAttempts = p.URL(t, brokerURL), true, 1000
	// Short, since every publish to the stalled broker waits this long, but
	// long enough for confirms to come in time once it answers again.
	cfg.PublishTimeout, cfg.Lease = time.Second, 5*time.Second
	e.start(cfg, func(r *relay.Relay) { relay.SetConnectedHook(r, connected.hook()) })
	connected.waitAbove(t, 0, "the relay to connect")

	p.Stall(true)
	ids := e.publishN("ev", 5)
	testenv.WaitFor(t, 60*time.Second, "timed-out attempts on every row", func() bool {
		return e.count("attempts >= 2 AND last_error LIKE 'no confirm from the broker within PublishTimeout%'") == len(ids)
	})
	if n := e.count("state <> 'pending'"); n != 0 {
		t.Fatalf("%d rows left pending without a confirm", n)
	}
	p.Stall(false)
	e.requireDelivered(got, ids)
}

// Without LISTEN the relay still delivers everything, by polling alone,
// and opens no listener connection.
func TestPollingAloneDelivers(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.bindQueue()
	got := consume(t, e.queue)
	name := testenv.Name(t, "relay")
	cfg := e.config(name)
	cfg.DisableListen = true
	e.start(cfg)
	ids := e.publishN("ev", 200)
	got.waitDistinct(t, len(ids), 60*time.Second)
	got.requireOnce(t, ids, &e.claims)
	var listeners int
	if err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, name+" listener").Scan(&listeners); err != nil {
		t.Fatal(err)
	}
	if listeners != 0 {
		t.Fatalf("%d listener connections with DisableListen", listeners)
	}
}

func hostOf(t *testing.T, rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	if u.Port() == "" {
		return u.Hostname() + ":5672"
	}
	return u.Host
}

// Under mandatory, an exchange with no bound queue returns the message:
// that is a failed attempt, not a delivery.
func TestUnroutableIsNotDelivered(t *testing.T) {
	t.Parallel()
	e := newEnv(t) // the exchange exists, nothing is bound to it
	ids := e.publishN("ev", 5)
	cfg := e.config(testenv.Name(t, "relay"))
	cfg.KeepDelivered, cfg.MaxAttempts = true, 1000
	e.start(cfg)
	testenv.WaitFor(t, 60*time.Second, "three returned attempts per row", func() bool {
		return e.count("attempts >= 3 AND last_error LIKE '%returned%'") == len(ids)
	})
	if n := e.count("state <> 'pending'"); n != 0 {
		t.Fatalf("%d unroutable rows left pending", n)
	}
	e.bindQueue()
	e.requireDelivered(consume(t, e.queue), ids)
}

// Rows that cannot be published end dead — at once when retrying cannot
// help, after MaxAttempts when the broker keeps refusing — while the other
// rows flow.
func TestPoisonRowsDieWhileTheRestFlow(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.refusePoison()
	got := consume(t, e.queue)

	var good []warren.Event
	var goodIDs []string
	for i := range 50 {
		ev := event(fmt.Sprintf("good-%d", i))
		ev.Type = "good.updated"
		good = append(good, ev)
		goodIDs = append(goodIDs, ev.ID)
	}
	nacked := event("nacked")
	nacked.Type = "poison.updated"
	big := event("too-big")
	big.Type = "good.big"
	big.Payload.Data = json.RawMessage(`{"blob":"` + strings.Repeat("x", 4096) + `"}`)
	e.publish(slices.Concat(good[:25], []warren.Event{nacked, big})...)
	e.publish(good[25:]...)
	// A row written around the table's checks (say by an old trigger).
	e.exec(`ALTER TABLE {table} DROP CONSTRAINT ` + fmt.Sprintf("%q", e.table+"_extra_check"))
	e.exec(`INSERT INTO {table} (event_id, event_type, extra) VALUES ('undecodable', 'good.x', '[1,2]')`)

	cfg := e.config(testenv.Name(t, "relay"))
	cfg.MaxAttempts, cfg.MaxMessageBytes = 3, 2048
	e.start(cfg)
	got.waitDistinct(t, len(good), 60*time.Second)
	testenv.WaitFor(t, 60*time.Second, "three dead rows", func() bool { return e.count("state = 'dead'") == 3 })

	for id, want := range map[string]struct {
		attempts int
		err      string
	}{
		"nacked":      {3, "nacked"},
		"too-big":     {1, "MaxMessageBytes"},
		"undecodable": {1, "extra column is not a JSON object"},
	} {
		if n := e.count("event_id = $1 AND state = 'dead' AND attempts = $2 AND strpos(last_error, $3) > 0 AND finished_at IS NOT NULL", id, want.attempts, want.err); n != 1 {
			var row struct {
				state, lastError string
				attempts         int
			}
			e.pool.QueryRow(context.Background(), fmt.Sprintf(`SELECT state, attempts, coalesce(last_error, '') FROM %q WHERE event_id = $1`, e.table), id).Scan(&row.state, &row.attempts, &row.lastError)
			t.Errorf("row %s: %+v; want dead after %d attempts with an error mentioning %q", id, row, want.attempts, want.err)
		}
	}
	got.requireOnce(t, goodIDs, &e.claims)
	if n := e.count("true"); n != 3 {
		t.Errorf("%d rows left, want only the 3 dead ones", n)
	}
}

// A row whose last attempt's relay vanished (its lease lapsed with no
// settle) is made dead at the next claim rather than tried again.
func TestLapsedLastAttemptMakesRowDead(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.bindQueue()
	got := consume(t, e.queue)
	e.publish(event("doomed"), event("fine"))
	e.exec(`UPDATE {table} SET attempts = 3, claims = 3, claimed_by = 'vanished', available_at = now() - interval '1 second',
		last_error = 'earlier failure' WHERE event_id = 'doomed'`)
	cfg := e.config(testenv.Name(t, "relay"))
	cfg.MaxAttempts = 3
	e.start(cfg)
	got.waitDistinct(t, 1, 60*time.Second)
	testenv.WaitFor(t, 60*time.Second, "the doomed row dead", func() bool {
		return e.count("event_id = 'doomed' AND state = 'dead' AND claimed_by IS NULL AND last_error LIKE 'gave up after 3 attempts%earlier failure%'") == 1
	})
	if got.has("doomed") {
		t.Fatal("a row whose attempts were spent was published again")
	}
}

// With OrderByEntity, each entity's events arrive in outbox order even
// with several relays, and a failing row holds back only its own entity.
func TestOrderByEntity(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.refusePoison()
	got := consume(t, e.queue)

	// Entities a, b, c get 40 events each, interleaved; entity x's first
	// event is refused by the broker, its 10 followers are fine.
	var evs []warren.Event
	mk := func(entity string, seq int, typ string) warren.Event {
		ev := event(fmt.Sprintf("%s-%03d", entity, seq))
		ev.EntityID, ev.Type = entity, typ
		return ev
	}
	evs = append(evs, mk("x", 0, "poison.updated"))
	for seq := range 40 {
		for _, entity := range []string{"a", "b", "c"} {
			evs = append(evs, mk(entity, seq, "good.updated"))
		}
		if seq < 10 {
			evs = append(evs, mk("x", seq+1, "good.updated"))
		}
	}
	e.publish(evs...)

	for i := range 3 {
		cfg := e.config(testenv.Name(t, fmt.Sprintf("relay%d", i)))
		cfg.OrderByEntity, cfg.BatchSize = true, 7
		// The head's retry waits until the test makes it due, however
		// slow the machine: the checks below need it still pending.
		cfg.MaxAttempts, cfg.RetryMin, cfg.RetryMax = 2, time.Hour, time.Hour
		e.start(cfg)
	}
	got.waitDistinct(t, 120, 60*time.Second) // a, b and c
	if n := e.count("entity_id = 'x' AND event_type = 'poison.updated' AND state = 'pending' AND attempts = 1"); n != 1 {
		t.Fatal("the failing head of entity x is not waiting for its retry; the check below would prove nothing")
	}
	if n := e.count("entity_id = 'x' AND event_type = 'good.updated' AND claims = 0"); n != 10 {
		t.Fatalf("%d of entity x's 10 later events were never claimed, want all 10 held back by its failing head", n)
	}
	// x's head makes its last attempt now, dies, and lets its followers go.
	e.exec(`UPDATE {table} SET available_at = now() WHERE event_id = 'x-000'`)
	got.waitDistinct(t, 130, 90*time.Second)
	if n := e.count("event_id = 'x-000' AND state = 'dead'"); n != 1 {
		t.Fatal("entity x's head is not dead")
	}

	last := map[string]int{}
	for _, d := range got.deliveries() {
		entity, seqText, _ := strings.Cut(d.MessageId, "-")
		seq, _ := strconv.Atoi(seqText)
		if prev, ok := last[entity]; ok && seq <= prev {
			t.Errorf("entity %s: event %d arrived after %d", entity, seq, prev)
		}
		last[entity] = seq
	}
}

// LISTEN/NOTIFY wakes an idle relay after a commit, also after its
// listener connection was killed: with a poll that never comes during the
// test, every event that arrives was woken for. (Within milliseconds on an
// idle machine; the latency is logged, not asserted, since a busy machine
// can take seconds.)
func TestNotifyWakesRelayBeforePoll(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.bindQueue()
	got := consume(t, e.queue)
	name := testenv.Name(t, "relay")
	var listening, connected counter
	cfg := e.config(name)
	cfg.PollMin, cfg.PollMax, cfg.Workers = time.Hour, time.Hour, 1
	e.start(cfg, func(r *relay.Relay) {
		relay.SetListeningHook(r, listening.hook())
		relay.SetConnectedHook(r, connected.hook())
	})
	connected.waitAbove(t, 0, "the relay to connect")
	listening.waitAbove(t, 0, "the relay to listen")

	measure := func(prefix string, n int) []time.Duration {
		var lat []time.Duration
		for i := range n {
			id := fmt.Sprintf("%s-%d", prefix, i)
			e.publish(event(id))
			committed := time.Now()
			testenv.WaitFor(t, 60*time.Second, "event "+id+" (notifications are not waking the relay)", func() bool { return got.has(id) })
			at, _ := got.receivedAt(id)
			lat = append(lat, at.Sub(committed))
		}
		slices.Sort(lat)
		return lat
	}
	lat := measure("ev", 30)
	t.Logf("commit-to-consumer latency over %d events, poll 1h: p50 %v, max %v", len(lat), lat[len(lat)/2], lat[len(lat)-1])

	was := listening.value()
	if n := testenv.TerminateBackends(t, name); n == 0 {
		t.Fatal("terminated no backends of the relay")
	}
	listening.waitAbove(t, was, "the listener to reconnect")
	lat = measure("after", 5)
	t.Logf("after the listener reconnected: max %v", lat[len(lat)-1])
}

func TestRunFailsClearlyWithoutTheTable(t *testing.T) {
	t.Parallel()
	table := testenv.Name(t, "m")
	r, err := relay.New(relay.Config{DatabaseURL: testenv.DatabaseURL(t), Table: table, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	err = r.Run(ctx)
	if !errors.Is(err, outbox.ErrSchema) || !strings.Contains(err.Error(), "migrate") {
		t.Fatalf("got %v, want ErrSchema telling to migrate", err)
	}
	if err := r.Run(ctx); !errors.Is(err, relay.ErrAlreadyRunning) {
		t.Fatalf("a second Run after the first returned: %v, want ErrAlreadyRunning", err)
	}
}

// A relay runs once: a second Run, while the first is running, is refused
// with an error a caller can test for, and the first keeps running.
func TestRunTwiceIsAnError(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.bindQueue()
	got := consume(t, e.queue)
	connected := make(chan struct{}, 1)
	run := e.start(e.config(testenv.Name(t, "relay")), func(r *relay.Relay) {
		relay.SetConnectedHook(r, func() {
			select {
			case connected <- struct{}{}:
			default:
			}
		})
	})
	select {
	case <-connected:
	case <-time.After(60 * time.Second):
		t.Fatal("the relay did not connect to the broker within 60s")
	}
	if err := run.relay.Run(context.Background()); !errors.Is(err, relay.ErrAlreadyRunning) {
		t.Fatalf("second Run = %v, want ErrAlreadyRunning", err)
	}
	ids := e.publishN("after-second-run", 3)
	got.waitDistinct(t, len(ids), 60*time.Second)
	got.requireAll(t, ids)
	if err := run.stop(); err != nil {
		t.Fatalf("first Run ended with %v", err)
	}
}

// Stopping a relay that is still waiting for Postgres at start-up is a
// clean stop, not an error, even when the stop lands in the middle of its
// schema check (here, against a Postgres that stopped answering).
func TestStopWhileWaitingForPostgresIsClean(t *testing.T) {
	t.Parallel()
	dbURL := testenv.DatabaseURL(t)
	u, _ := url.Parse(dbURL)
	proxy := testenv.StartProxy(t, u.Host)
	proxy.Stall(true)
	r, err := relay.New(relay.Config{DatabaseURL: proxy.URL(t, dbURL), Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := r.Run(ctx); err != nil {
		t.Fatalf("Run = %v, want nil after a stop during start-up", err)
	}
}

// A relay given two addresses of the broker (standing in for two nodes of
// a cluster) goes on delivering when the address it is connected to goes
// away: it reconnects through the other one by itself, and every row
// written meanwhile arrives.
func TestFailsOverToAnotherAddressOfTheList(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.bindQueue()
	got := consume(t, e.queue)
	brokerURL := testenv.AMQPURL(t)
	a, b := testenv.StartProxy(t, hostOf(t, brokerURL)), testenv.StartProxy(t, hostOf(t, brokerURL))
	var connected counter
	cfg := e.config(testenv.Name(t, "relay"))
	cfg.AMQPURL, cfg.KeepDelivered = a.URL(t, brokerURL)+","+b.URL(t, brokerURL), true
	e.start(cfg, func(r *relay.Relay) { relay.SetConnectedHook(r, connected.hook()) })
	connected.waitAbove(t, 0, "the relay to connect")
	var all []string
	// Each phase takes one address away and brings the other back, so at
	// least one of the two phases cuts the connection in use.
	for i, down := range []*testenv.Proxy{a, b} {
		up := map[*testenv.Proxy]*testenv.Proxy{a: b, b: a}[down]
		up.SetUp(true)
		down.SetUp(false)
		all = append(all, e.publishN(fmt.Sprintf("phase%d", i), 100)...)
		got.waitDistinct(t, len(all), 60*time.Second)
	}
	e.requireDelivered(got, all)
	if n := connected.value(); n < 2 {
		t.Fatalf("connected %d times: the second phase must have cut the connection in use", n)
	}
}
