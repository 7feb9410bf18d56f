package relay_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/internal/testenv/localrabbit"
	"github.com/warrenmq/warren/relay"
)

// A broker that refuses a relay it let in before (a password rotated under
// a running relay, an auth backend failing) does not end Run, as a refusal
// at the start does: the relay retries, loudly, and publishes again once
// the broker lets it in.
func testRefusedReconnectIsRetried(t *testing.T) {
	node := localrabbit.Shared(t)
	user := node.AddUser(t, testenv.Name(t, "u"), ".*", ".*", ".*")
	ob := testenv.NewOutboxTable(t)
	exchange := testenv.Name(t, "ex")
	testenv.CleanupExchangesAt(t, node.URL(), exchange)
	logs := &testenv.LogBuffer{}
	r, err := relay.New(relay.Config{
		Pool: ob.Pool, Table: ob.Table.Name(), Exchange: exchange, AMQPURL: user.URL(), Name: testenv.Name(t, "relay"),
		ReconnectMaxDelay: 500 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	sessions := make(chan struct{}, 16)
	relay.SetConnectedHook(r, func() { sessions <- struct{}{} })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	waitSession := func(what string) {
		t.Helper()
		select {
		case <-sessions:
		case err := <-done:
			t.Fatalf("Run returned %v, waiting for a broker session %s", err, what)
		case <-time.After(time.Minute):
			t.Fatalf("no broker session %s within a minute; log:\n%s", what, logs)
		}
	}
	waitSession("at start")
	user.LockOut(t)
	testenv.WaitFor(t, time.Minute, "the relay to be refused and retry", func() bool {
		return logs.Has("refuses the relay it let in before")
	})
	user.LetIn(t)
	waitSession("after the broker let it in again")
}
