package relay_test

import (
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/outbox"
	"github.com/warrenmq/warren/relay"
)

// probe GETs path on the health server and decodes its body.
func probe(t *testing.T, srv *httptest.Server, path string) (int, relay.Health) {
	t.Helper()
	resp, err := http.Get(srv.URL + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	var h relay.Health
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
		t.Fatalf("GET %s: decode: %v", path, err)
	}
	return resp.StatusCode, h
}

func waitStatus(t *testing.T, srv *httptest.Server, path string, want int) relay.Health {
	t.Helper()
	var h relay.Health
	testenv.WaitFor(t, 60*time.Second, path+" to answer "+http.StatusText(want), func() bool {
		var code int
		code, h = probe(t, srv, path)
		return code == want
	})
	return h
}

// TestHealthFollowsTheRelay checks both endpoints through a relay's life:
// not started, relaying, its table gone (claims fail), stopped.
func TestHealthFollowsTheRelay(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.bindQueue()
	var srv *httptest.Server
	run := e.start(e.config(testenv.Name(t, "relay")), func(r *relay.Relay) {
		srv = httptest.NewServer(r.HealthHandler())
		t.Cleanup(srv.Close)
		for _, path := range []string{"/healthz", "/readyz"} {
			if code, _ := probe(t, srv, path); code != http.StatusServiceUnavailable {
				t.Errorf("%s before Run: %d, want 503", path, code)
			}
		}
	})

	h := waitStatus(t, srv, "/readyz", http.StatusOK)
	if !h.Alive || !h.BrokerConnected || !h.DatabaseOK || h.LastClaim.IsZero() {
		t.Errorf("ready relay reports %+v", h)
	}
	if code, _ := probe(t, srv, "/healthz"); code != http.StatusOK {
		t.Errorf("/healthz of a running relay: %d", code)
	}

	// Claims fail once the table is gone: not ready, still alive.
	e.exec(`DROP TABLE {table}`)
	h = waitStatus(t, srv, "/readyz", http.StatusServiceUnavailable)
	if h.DatabaseOK || !h.Alive {
		t.Errorf("relay whose claims fail reports %+v", h)
	}
	if code, _ := probe(t, srv, "/healthz"); code != http.StatusOK {
		t.Errorf("/healthz of a relay whose claims fail: %d, want 200 (restarting cannot bring the table back)", code)
	}

	if err := run.stop(); err != nil {
		t.Fatal(err)
	}
	if code, h := probe(t, srv, "/healthz"); code != http.StatusServiceUnavailable || h.Alive {
		t.Errorf("/healthz after Run returned: %d %+v", code, h)
	}
}

// TestHealthWithoutBroker runs a relay whose broker refuses connections:
// alive (it is waiting it out) but not ready.
func TestHealthWithoutBroker(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := ln.Addr().String()
	ln.Close() // nothing listens there now
	cfg := e.config(testenv.Name(t, "relay"))
	cfg.AMQPURL = "amqp://guest:guest@" + deadAddr + "/"
	var srv *httptest.Server
	listening := make(chan struct{})
	var once sync.Once
	e.start(cfg, func(r *relay.Relay) {
		srv = httptest.NewServer(r.HealthHandler())
		t.Cleanup(srv.Close)
		// The listener starts after the schema check: past it, the relay
		// is only waiting for the broker.
		relay.SetListeningHook(r, func() { once.Do(func() { close(listening) }) })
	})
	select {
	case <-listening:
	case <-time.After(60 * time.Second):
		t.Fatal("the relay never started listening")
	}
	h := waitStatus(t, srv, "/healthz", http.StatusOK)
	if h.BrokerConnected || h.Ready {
		t.Errorf("relay without a broker reports %+v", h)
	}
	if code, _ := probe(t, srv, "/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz without a broker: %d, want 503", code)
	}
}

// TestHealthSeesAStuckWorker holds one worker inside a cycle for longer
// than a healthy cycle can take: /healthz fails while it is stuck and
// recovers when it moves on.
func TestHealthSeesAStuckWorker(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.bindQueue()
	cfg := e.config(testenv.Name(t, "relay"))
	// A healthy cycle here takes at most 2×Lease + PollMax +
	// ReconnectMaxDelay = 4.1s: short, but the claim (bounded by
	// Lease/2) must fit in it on a busy machine.
	cfg.Lease, cfg.PublishTimeout = 2*time.Second, time.Second
	cfg.PollMax, cfg.ReconnectMaxDelay = 50*time.Millisecond, 50*time.Millisecond
	release := make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	var held sync.Once
	var srv *httptest.Server
	e.start(cfg, func(r *relay.Relay) {
		srv = httptest.NewServer(r.HealthHandler())
		t.Cleanup(srv.Close)
		relay.SetAfterClaimHook(r, func([]outbox.Row) {
			held.Do(func() { <-release })
		})
	})
	e.publish(event("stuck-1"))
	h := waitStatus(t, srv, "/healthz", http.StatusServiceUnavailable)
	if h.StuckWorkers != 1 {
		t.Errorf("stuck_workers = %d, want 1", h.StuckWorkers)
	}
	once.Do(func() { close(release) })
	h = waitStatus(t, srv, "/healthz", http.StatusOK)
	if h.StuckWorkers != 0 {
		t.Errorf("after release: stuck_workers = %d", h.StuckWorkers)
	}
}
