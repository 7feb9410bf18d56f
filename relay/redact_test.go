package relay_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/warrenmq/warren/internal/testenv"
)

// A publish error leaves the process twice: in the relay's log and in the
// row's last_error, which Postgres keeps and `warren outbox dead` prints.
// The broker returns an unroutable message with its routing key, the
// event type, in the error's text; a type that quotes a URL with a
// password and a ?token= must reach neither place in clear.
func TestPublishErrorSecretsStayOutOfLogAndLastError(t *testing.T) {
	t.Parallel()
	e := newEnv(t) // no queue bound: every publish is returned unroutable
	logs := recordLogs(t)
	cfg := e.config(testenv.Name(t, "relay"))
	cfg.Logger = logs.logger
	cfg.MaxAttempts = 1
	const password, token = "pw-s3cr3t-77", "tok-s3cr3t-88"
	ev := event("leaky")
	ev.Type = fmt.Sprintf("hook https://bob:%s@hooks.example/x?token=%s", password, token)
	e.publish(ev)
	e.start(cfg)

	testenv.WaitFor(t, 60*time.Second, "the row dead", func() bool { return e.count("state = 'dead'") == 1 })
	var lastError string
	if err := e.pool.QueryRow(context.Background(), fmt.Sprintf(`SELECT last_error FROM %q`, e.table)).Scan(&lastError); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(lastError, "returned") || !strings.Contains(lastError, "https://bob:xxxxx@hooks.example/x?token=xxxxx") {
		t.Errorf("last_error %q: want the return, its routing key redacted", lastError)
	}
	// The dead row's log line is written when its settle is read back,
	// after the row is dead in the table.
	testenv.WaitFor(t, 60*time.Second, "the dead row's log line", func() bool { return logs.contains("outbox row is dead") })
	for _, where := range []string{lastError, logs.text()} {
		if strings.Contains(where, password) || strings.Contains(where, token) {
			t.Errorf("a secret left in %q", where)
		}
	}
}

// A row whose last attempt's lease lapsed is made dead at its next claim,
// and that log line quotes the row's last_error as the table holds it:
// text the relay did not write (an older relay's, or a producer's), so
// only the relay's logger can keep its secrets out of the log.
func TestLastErrorFromTheTableIsRedactedInTheLog(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	logs := recordLogs(t)
	cfg := e.config(testenv.Name(t, "relay"))
	cfg.Logger = logs.logger
	cfg.MaxAttempts = 1
	const password = "pw-s3cr3t-99"
	e.publish(event("lapsed"))
	e.exec(`UPDATE {table} SET attempts = 1, last_error = $1`, "POST https://bob:"+password+"@hooks.example/x: 500")
	e.start(cfg)

	testenv.WaitFor(t, 60*time.Second, "the dead row's log line", func() bool { return logs.contains("outbox row is dead") })
	if log := logs.text(); strings.Contains(log, password) || !strings.Contains(log, "https://bob:xxxxx@hooks.example/x: 500") {
		t.Errorf("want the last error redacted in the log: %s", log)
	}
}
