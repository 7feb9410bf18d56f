package relay_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/warrenmq/warren/internal/amqpx"
	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/internal/testenv/localrabbit"
	"github.com/warrenmq/warren/relay/internal/relaytest"
)

// A broker under a memory alarm blocks the relay's connection and stops
// reading it: every publish times out, through no fault of the rows. The
// relay must see the block (log, health, Observer), stop claiming, and
// give back the attempt of a publish the block timed out, so a row
// outlives an alarm longer than MaxAttempts publish timeouts and is
// delivered once it lifts. The alarm is raised on a private node.
func testBlockedBrokerSpendsNoAttempts(t *testing.T) {
	node := localrabbit.Shared(t)
	e := newEnv(t)
	conn, err := amqpx.Dial(context.Background(), node.URL(), amqpx.DialOptions{Name: t.Name()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { amqpx.CloseConnection(conn, 5*time.Second) })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ch.QueueDelete(e.queue, false, false, false)
		ch.ExchangeDelete(e.exchange, false, false)
	})
	for _, err := range []error{
		ch.ExchangeDeclare(e.exchange, "fanout", true, false, false, false, nil),
		declareQueue(ch, e.queue, nil),
		ch.QueueBind(e.queue, "", e.exchange, false, nil),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}

	const maxAttempts = 3
	obs := &relaytest.Recorder{}
	logs := recordLogs(t)
	cfg := e.config(testenv.Name(t, "relay"))
	cfg.AMQPURL, cfg.Observer, cfg.Logger = node.URL(), obs, logs.logger
	cfg.MaxAttempts, cfg.Workers = maxAttempts, 1
	// Half the default: the alarm below spans 2 × maxAttempts of them, and
	// what it shows (no timeout during an alarm spends an attempt) does not
	// depend on their length; 5s still gives a busy machine room to
	// confirm once the alarm lifts.
	cfg.PublishTimeout = 5 * time.Second
	run := e.start(cfg)
	srv := httptest.NewServer(run.relay.HealthHandler())
	t.Cleanup(srv.Close)
	waitStatus(t, srv, "/readyz", http.StatusOK)

	lift := node.Alarm(t)
	e.publish(event("ev-1"))
	h := waitStatus(t, srv, "/readyz", http.StatusServiceUnavailable)
	// The blocked state changes first; the log line and the Observer
	// call follow it.
	testenv.WaitFor(t, time.Minute, "the block logged and observed", func() bool {
		return obs.Counts().Blocked >= 1 && logs.contains("the broker blocked the connection")
	})
	if !h.BrokerBlocked || h.BlockedReason == "" || h.BlockedSince.IsZero() {
		t.Errorf("a blocked relay reports %+v, want broker_blocked with its reason and time", h)
	}
	if code, _ := probe(t, srv, "/healthz"); code != http.StatusOK {
		t.Errorf("/healthz %d while the broker blocks the relay, want 200: a restart cannot help", code)
	}
	if n := obs.Counts().Blocked; n != 1 {
		t.Errorf("Observer.Blocked called %d times, want 1", n)
	}
	if !logs.contains("the broker blocked the connection") {
		t.Errorf("no warning that the broker blocked the connection; log:\n%s", logs.text())
	}

	// The alarm lasts twice as long as the publish timeouts that would
	// spend every attempt; the row must stay alive all along.
	alarm := time.NewTimer(2 * maxAttempts * cfg.PublishTimeout)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for alarmed := true; alarmed; {
		select {
		case <-alarm.C:
			alarmed = false
		case <-tick.C:
		}
		if e.count("state = 'dead'") > 0 {
			t.Fatalf("the row went dead while the broker blocked the relay; log:\n%s", logs.text())
		}
	}
	// The one claim the relay made before it saw the block (its publish
	// is what the broker blocked) gave its attempt back, and the relay
	// claimed nothing more until the alarm lifted: without the claim gate
	// it would have claimed the row once per PublishTimeout, without the
	// give-back the row would hold a spent attempt.
	var attempts, claims int
	if err := e.pool.QueryRow(context.Background(),
		fmt.Sprintf(`SELECT attempts, claims FROM %q WHERE event_id = 'ev-1'`, e.table)).Scan(&attempts, &claims); err != nil {
		t.Fatal(err)
	}
	if attempts != 0 {
		t.Errorf("the row has %d attempts spent after %v of alarm, want 0: the blocked publish's attempt was not given back", attempts, 2*maxAttempts*cfg.PublishTimeout)
	}
	if claims > 1 {
		t.Errorf("the row was claimed %d times during the alarm, want at most once (before the block was seen)", claims)
	}
	lift()

	testenv.WaitFor(t, time.Minute, "the row to be delivered once the alarm lifted", func() bool { return e.count("true") == 0 })
	waitStatus(t, srv, "/readyz", http.StatusOK)
	if n := obs.Counts().Unblocked; n != 1 {
		t.Errorf("Observer.Unblocked called %d times, want 1", n)
	}
	// Confirmed, so the message is in the queue, once or (if the publish
	// the block held up went through when it lifted) twice.
	got := testenv.MessageIDs(testenv.Drain(t, conn, e.queue))
	if len(got) == 0 || len(got) > 2 {
		t.Fatalf("queue holds %v, want ev-1 once or twice", got)
	}
	for _, id := range got {
		if id != "ev-1" {
			t.Fatalf("queue holds %v, want only ev-1", got)
		}
	}
}
