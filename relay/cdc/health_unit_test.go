package cdc

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// Health's verdicts from the relay's state: a reader that stopped sending
// statuses is not alive (a probe restarts it); a standby, which runs no
// reader, is alive and ready; a relay that retries is alive, not ready;
// and its error is shown without the password.
func TestHealthVerdicts(t *testing.T) {
	t.Parallel()
	r, err := New(Config{DatabaseURL: "postgres://localhost/test", Slot: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	check := func(what string, alive, ready bool, role Role) Health {
		t.Helper()
		h := r.Health()
		if h.Alive != alive || h.Ready != ready || h.Role != role || h.Slot != "s1" {
			t.Errorf("%s: %+v, want alive %v, ready %v, role %s", what, h, alive, ready, role)
		}
		return h
	}
	check("before Run", false, false, RoleStopped)

	r.health.setRole(RoleStarting)
	check("starting", true, false, RoleStarting)
	r.streaming.Store(true)
	r.flushed.Store(0x16B3748)
	r.health.stamp()
	if h := check("streaming", true, true, RoleStreaming); h.FlushedLSN != "0/16B3748" || h.LastBeat.IsZero() {
		t.Errorf("streaming: flushed %q, last beat %v", h.FlushedLSN, h.LastBeat)
	}
	r.health.beat.Store(time.Now().Add(-r.cfg.stuckAfter() - time.Second).UnixNano())
	check("streaming, the reader silent", false, false, RoleStreaming)

	r.streaming.Store(false)
	r.health.beat.Store(0)
	r.health.sessionEnded(fmt.Errorf("start streaming slot s1: %w", &pgconn.PgError{Code: sqlObjectInUse, Message: `replication slot "s1" is active for PID 42`}))
	if h := check("standby", true, true, RoleStandby); !strings.Contains(h.LastError, "PID 42") || h.LastErrorAt.IsZero() {
		t.Errorf("standby: last error %q at %v", h.LastError, h.LastErrorAt)
	}
	r.health.sessionEnded(errors.New("connect to postgres://app:hunter2@db/app: connection refused"))
	if h := check("retrying", true, false, RoleRetrying); strings.Contains(h.LastError, "hunter2") || !strings.Contains(h.LastError, "connection refused") {
		t.Errorf("retrying: last error %q", h.LastError)
	}
	r.health.setRole(RoleStopped)
	check("after Run", false, false, RoleStopped)
}
