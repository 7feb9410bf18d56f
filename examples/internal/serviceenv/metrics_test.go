package serviceenv_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/warrenmq/warren/consumer"
	"github.com/warrenmq/warren/dedup/memory"
	"github.com/warrenmq/warren/examples/internal/serviceenv"
	"github.com/warrenmq/warren/examples/internal/serviceenv/serviceenvtest"
	"github.com/warrenmq/warren/internal/testenv"
)

// NewMetrics makes the consumer report to the metrics Serve serves on
// /metrics, beside the service's own health handler; the server stops with
// its context, and a taken address fails Serve at once.
func TestMetricsServesTheConsumersMetricsBesideHealth(t *testing.T) {
	var cfg consumer.Config
	m, err := serviceenv.NewMetrics(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Observer == nil {
		t.Fatal("NewMetrics did not set the consumer's Observer")
	}
	cfg.Observer.Connected("svc", false)
	mem, err := memory.New(memory.Config{})
	if err != nil {
		t.Fatal(err)
	}
	store := m.Dedup(mem, "svc")
	if _, err := store.Claim(context.Background(), "svc:evt-1", time.Minute); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr := serviceenvtest.FreeAddr(t)
	health := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "health "+r.URL.Path) })
	if err := m.Serve(ctx, addr, health, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	get := func(path string) string {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	if body := get("/metrics"); !strings.Contains(body, `warren_consumer_connected{consumer="svc"} 1`) || !strings.Contains(body, "go_goroutines ") ||
		!strings.Contains(body, `warren_dedup_claims_total{consumer="svc",result="acquired"} 1`) {
		t.Errorf("/metrics lacks the consumer's, the dedup store's or the Go metrics:\n%s", body)
	}
	if body := get("/readyz"); body != "health /readyz" {
		t.Errorf("/readyz = %q, want the service's health handler", body)
	}
	if err := m.Serve(ctx, addr, health, slog.New(slog.DiscardHandler)); err == nil {
		t.Error("Serve on a taken address succeeded")
	}
	cancel()
	testenv.WaitFor(t, time.Minute, "the server stopped", func() bool {
		conn, err := net.Dial("tcp", addr)
		if err == nil {
			conn.Close()
		}
		return err != nil
	})
}
