package cdc_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/warrenmq/warren/internal/testenv"
)

// A dead row's last_error leaves the process: Postgres keeps it and
// `warren outbox dead` prints it. The broker returns an unroutable message
// with its routing key, the event type, in the error's text; a type that
// quotes a URL with a password and a ?token= must not reach it in clear,
// as it does not with the polling relay.
func TestDeadRowsLastErrorIsRedacted(t *testing.T) {
	t.Parallel()
	e := newEnv(t) // no queue bound: every publish is returned unroutable
	cfg := e.config()
	cfg.MaxAttempts = 1
	const password, token = "pw-s3cr3t-77", "tok-s3cr3t-88"
	ev := testenv.OutboxEvent("leaky")
	ev.Type = fmt.Sprintf("hook https://bob:%s@hooks.example/x?token=%s", password, token)
	e.start(cfg)
	e.ob.Publish(ev)

	testenv.WaitFor(t, 60*time.Second, "the row dead", func() bool { return e.ob.Count("state = 'dead'") == 1 })
	var lastError string
	if err := e.ob.Pool.QueryRow(context.Background(), fmt.Sprintf(`SELECT last_error FROM %q`, e.ob.Table.Name())).Scan(&lastError); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(lastError, "returned") || !strings.Contains(lastError, "https://bob:xxxxx@hooks.example/x?token=xxxxx") {
		t.Errorf("last_error %q: want the return, its routing key redacted", lastError)
	}
	if strings.Contains(lastError, password) || strings.Contains(lastError, token) {
		t.Errorf("a secret left in last_error %q", lastError)
	}
}
