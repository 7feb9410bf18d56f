package cdc_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/relay/cdc"
)

// probe GETs path from the relay's health handler and decodes its body.
func probe(t *testing.T, r *cdc.Relay, path string) (int, cdc.Health) {
	t.Helper()
	rec := httptest.NewRecorder()
	r.HealthHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	var h cdc.Health
	if err := json.Unmarshal(rec.Body.Bytes(), &h); err != nil {
		t.Fatalf("GET %s: %v: %s", path, err, rec.Body)
	}
	return rec.Code, h
}

// waitReady waits for /readyz to answer 200 with role, and returns its body.
func waitReady(t *testing.T, r *cdc.Relay, role cdc.Role) cdc.Health {
	t.Helper()
	var h cdc.Health
	testenv.WaitFor(t, 30*time.Second, "/readyz to answer 200 as "+string(role), func() bool {
		var code int
		code, h = probe(t, r, "/readyz")
		return code == http.StatusOK && h.Role == role
	})
	return h
}

func flushed(t *testing.T, h cdc.Health) pglogrepl.LSN {
	t.Helper()
	lsn, err := pglogrepl.ParseLSN(h.FlushedLSN)
	if err != nil {
		t.Fatalf("flushed_lsn %q: %v", h.FlushedLSN, err)
	}
	return lsn
}

// The probes follow a group: a relay before Run, streaming (its flushed
// position moving as it publishes), a second one standing by, the first
// stopped and the second taking over.
func TestHealthFollowsTheGroup(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.bindQueue()
	idle, err := cdc.New(e.config())
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, h := probe(t, idle, path); code != http.StatusServiceUnavailable || h.Role != cdc.RoleStopped {
			t.Errorf("%s before Run: %d %+v, want 503 and role stopped", path, code, h)
		}
	}

	a, stopA := e.start(e.config())
	h := waitReady(t, a, cdc.RoleStreaming)
	if h.Slot != e.slot || !h.Alive {
		t.Errorf("streaming relay: %+v", h)
	}
	// The reader starts a moment after the session is streaming, and
	// beats from its first round.
	testenv.WaitFor(t, 30*time.Second, "the reader's first beat", func() bool {
		_, h = probe(t, a, "/healthz")
		return !h.LastBeat.IsZero()
	})
	start := flushed(t, h)
	e.receive(e.ob.PublishN("moves", 20), time.Minute)
	testenv.WaitFor(t, 30*time.Second, "the flushed position to move past the events", func() bool {
		_, h := probe(t, a, "/readyz")
		return flushed(t, h) > start
	})

	b, _ := e.start(e.config())
	h = waitReady(t, b, cdc.RoleStandby)
	if !strings.Contains(h.LastError, "55006") || h.Slot != e.slot {
		t.Errorf("standby: %+v, want the held slot (SQLSTATE 55006) as its last error", h)
	}
	if code, _ := probe(t, b, "/healthz"); code != http.StatusOK {
		t.Errorf("/healthz of a standby: %d", code)
	}

	stopA()
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, h := probe(t, a, path); code != http.StatusServiceUnavailable || h.Alive || h.Role != cdc.RoleStopped {
			t.Errorf("%s of a stopped relay: %d %+v", path, code, h)
		}
	}
	waitReady(t, b, cdc.RoleStreaming)
}

// A relay that cannot start a session (its broker does not answer) is
// alive, since a restart would not help, but not ready, and says why.
func TestHealthOfARelayThatCannotStart(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := e.config()
	cfg.AMQPURL = "amqp://guest:guest@127.0.0.1:1/" // nothing listens on port 1
	cfg.Slot = e.slot
	r, _ := e.start(cfg)
	testenv.WaitFor(t, 30*time.Second, "the relay to retry", func() bool { return r.Health().Role == cdc.RoleRetrying })
	if code, h := probe(t, r, "/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(h.LastError, "connection refused") {
		t.Errorf("/readyz: %d %+v, want 503 and the unreachable broker", code, h)
	}
	if code, _ := probe(t, r, "/healthz"); code != http.StatusOK {
		t.Errorf("/healthz: %d, want 200", code)
	}
}

// A missing outbox table ends Run with ErrNoTable, as the polling relay
// refuses it: waiting would not create it.
func TestRunStopsOnAMissingTable(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := e.config()
	cfg.Table = testenv.Name(t, "gone")
	cfg.Slot = e.slot // never made: the session fails before
	r, err := cdc.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := r.Run(ctx); !errors.Is(err, cdc.ErrNoTable) || !strings.Contains(err.Error(), "warren outbox migrate") {
		t.Fatalf("Run on a missing table: %v, want ErrNoTable saying to migrate", err)
	}
}
