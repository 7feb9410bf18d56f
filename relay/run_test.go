package relay_test

// Ordering, wake-ups, and how Run starts, fails and stops.

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/outbox"
	"github.com/warrenmq/warren/relay"
)

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
