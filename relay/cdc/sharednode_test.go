package cdc_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/warrenmq/warren/internal/amqpx"
	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/internal/testenv/localrabbit"
	"github.com/warrenmq/warren/relay/internal/relaytest"
)

// TestSharedNode runs the tests that alarm or reconfigure the binary's
// shared private node one after another, beside the package's other
// tests. One of them alone: go test -run 'TestSharedNode/BlockedBrokerIsReported'.
func TestSharedNode(t *testing.T) {
	localrabbit.RunLane(t, []localrabbit.LaneTest{
		{Name: "RefusedReconnectIsRetried", Run: testRefusedReconnectIsRetried},
		{Name: "BlockedBrokerIsReported", Run: testBlockedBrokerIsReported},
	})
}

// A broker under a memory alarm blocks the relay's connection once it
// publishes, and reads nothing more of it. The CDC relay sees it as the
// polling relay does (ADR 017): its health says blocked, with the reason,
// not ready but alive (a restart cannot help); it logs it and tells an
// Observer that implements relay.BlockObserver; and once the alarm lifts
// the event is delivered and the relay is ready again.
func testBlockedBrokerIsReported(t *testing.T) {
	node := localrabbit.Shared(t)
	e := newEnv(t)
	testenv.CleanupExchangesAt(t, node.URL(), e.exchange)
	conn, err := amqpx.Dial(context.Background(), node.URL(), amqpx.DialOptions{Name: t.Name()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { amqpx.CloseConnection(conn, 5*time.Second) })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ch.QueueDelete(e.queue, false, false, false) })
	for _, err := range []error{
		ch.ExchangeDeclare(e.exchange, "fanout", true, false, false, false, nil),
		func() error { _, err := ch.QueueDeclare(e.queue, true, false, false, false, nil); return err }(),
		ch.QueueBind(e.queue, "", e.exchange, false, nil),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	obs := &relaytest.Recorder{}
	logs := &testenv.LogBuffer{}
	cfg := e.config()
	cfg.AMQPURL, cfg.Observer, cfg.Logger = node.URL(), obs, slog.New(slog.NewTextHandler(logs, nil))
	// Long enough that the blocked session outlives the checks below:
	// its end would reset the block, as a new connection starts unblocked.
	cfg.PublishTimeout = 5 * time.Minute
	r, _ := e.start(cfg)
	srv := httptest.NewServer(r.HealthHandler())
	t.Cleanup(srv.Close)
	testenv.WaitFor(t, time.Minute, "the relay to stream", r.Streaming)

	lift := node.Alarm(t)
	e.ob.Publish(testenv.OutboxEvent("under-alarm"))
	// The blocked state changes first; the log line and the Observer
	// call follow it.
	testenv.WaitFor(t, time.Minute, "the relay to report, log and observe the block", func() bool {
		return r.Health().BrokerBlocked && obs.Counts().Blocked >= 1 && logs.Has("the broker blocked the connection")
	})
	h := r.Health()
	if h.Ready || !h.Alive || h.BlockedReason == "" || h.BlockedSince.IsZero() {
		t.Errorf("a blocked relay reports %+v; want not ready, alive, with the broker's reason and the time", h)
	}
	if resp, err := http.Get(srv.URL + "/readyz"); err != nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("/readyz while blocked: %v %v, want 503", resp.StatusCode, err)
	}
	if n := obs.Counts().Blocked; n != 1 {
		t.Errorf("Observer.Blocked called %d times, want 1", n)
	}
	if !logs.Has("the broker blocked the connection") {
		t.Errorf("no warning that the broker blocked the connection; log:\n%s", logs.String())
	}

	lift()
	testenv.WaitFor(t, time.Minute, "the event to be delivered and trimmed once the alarm lifted", func() bool { return e.ob.Count("true") == 0 })
	testenv.WaitFor(t, time.Minute, "the relay to be ready again", func() bool { return r.Health().Ready })
	if n := obs.Counts().Unblocked; n != 1 {
		t.Errorf("Observer.Unblocked called %d times, want 1", n)
	}
	if got := testenv.MessageIDs(testenv.Drain(t, conn, e.queue)); len(got) == 0 || got[0] != "under-alarm" {
		t.Errorf("queue holds %v, want under-alarm (once, or twice if the blocked publish went through as the alarm lifted)", got)
	}
}
