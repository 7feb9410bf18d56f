package relay_test

// What the relay does when the broker or a row fails it.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/relay"
)

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
	// The good rows may settle in another worker's batch, after the dead ones.
	testenv.WaitFor(t, 60*time.Second, "only the 3 dead rows left", func() bool { return e.count("true") == 3 })
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
