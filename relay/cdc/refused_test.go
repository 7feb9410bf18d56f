package cdc_test

import (
	"log/slog"
	"testing"
	"time"

	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/internal/testenv/localrabbit"
)

// A broker that refuses a relay it let in before (a password rotated under
// a running relay, an auth backend failing) does not end Run, as a refusal
// at the start does: the relay starts again, loudly, and streams once the
// broker lets it in.
func testRefusedReconnectIsRetried(t *testing.T) {
	e := newEnv(t)
	node := localrabbit.Shared(t)
	user := node.AddUser(t, testenv.Name(t, "u"), ".*", ".*", ".*")
	testenv.CleanupExchangesAt(t, node.URL(), e.exchange)
	logs := &testenv.LogBuffer{}
	cfg := e.config()
	cfg.AMQPURL, cfg.Logger = user.URL(), slog.New(slog.NewTextHandler(logs, nil))
	r, _ := e.start(cfg)
	testenv.WaitFor(t, time.Minute, "the relay to stream", r.Streaming)
	user.LockOut(t)
	testenv.WaitFor(t, time.Minute, "the relay to be refused and start again", func() bool {
		return logs.Has("refuses the relay it let in before")
	})
	user.LetIn(t)
	testenv.WaitFor(t, time.Minute, "the relay to stream again", r.Streaming)
}
