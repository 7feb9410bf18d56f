package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	warrenpkg "github.com/warrenmq/warren"
	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/outbox"
)

// freeAddr returns a loopback address nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// TestRelayRunHealthAddr runs 'warren relay run --health-addr', polling
// and streaming, and checks its probes and its metrics after relaying
// three events.
func TestRelayRunHealthAddr(t *testing.T) {
	t.Parallel()
	for _, mode := range []struct {
		name string
		// ready is in /readyz's body once ready; metrics are lines of
		// /metrics after the three events, the first one awaited.
		ready   string
		metrics func(table string) []string
	}{
		{"poll", `"ready":true`, func(table string) []string {
			return []string{`warren_relay_published_total{outbox="` + table + `"} 3` + "\n", `warren_relay_publish_failures_total{outbox="` + table + `"} 0`}
		}},
		{"cdc", `"role":"streaming"`, func(table string) []string {
			group := `{outbox="` + table + `",slot="` + table + `_cdc"}`
			// The polling relay's metrics, from the same Observer calls,
			// then the slot's own.
			return []string{`warren_relay_published_total{outbox="` + table + `"} 3` + "\n", `warren_relay_publish_failures_total{outbox="` + table + `"} 0`,
				"warren_cdc_relay_streaming" + group + " 1",
				"warren_cdc_slot_active" + group + " 1", "warren_cdc_slot_lag_bytes" + group, "warren_cdc_slot_status_errors_total" + group + " 0"}
		}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			table := testenv.Name(t, "ob")
			testenv.DropTables(t, table, table+"_migrations")
			pool := testenv.PgPool(t)
			ob, err := outbox.New(table)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := ob.Migrate(ctx, pool); err != nil {
				t.Fatal(err)
			}
			if mode.name == "cdc" {
				testenv.CDCSlot(t, pool, table)
			}
			exchange, queue := testenv.Name(t, "ex"), testenv.Name(t, "q")
			testenv.CleanupExchanges(t, exchange)
			testenv.CleanupQueues(t, queue)
			ch := testenv.Channel(t)
			for _, err := range []error{
				ch.ExchangeDeclare(exchange, "fanout", true, false, false, false, nil),
				func() error { _, err := ch.QueueDeclare(queue, true, false, false, false, nil); return err }(),
				ch.QueueBind(queue, "", exchange, false, nil),
			} {
				if err != nil {
					t.Fatal(err)
				}
			}

			addr := freeAddr(t)
			environ := map[string]string{"DATABASE_URL": testenv.DatabaseURL(t), "WARREN_OUTBOX_TABLE": table, "AMQP_URL": testenv.AMQPURL(t), "WARREN_EXCHANGE": exchange}
			runCtx, cancel := context.WithCancel(ctx)
			var r outboxCLIResult
			finished := make(chan struct{})
			go func() {
				defer close(finished)
				r = runOutboxCLI(runCtx, environ, "relay", "run", "--mode", mode.name, "--name", testenv.Name(t, "relay"), "--health-addr", addr)
			}()
			t.Cleanup(func() {
				cancel()
				<-finished
			})
			base := "http://" + addr
			testenv.WaitFor(t, 60*time.Second, "/readyz to answer 200", func() bool {
				code, body := get(t, base+"/readyz")
				return code == http.StatusOK && strings.Contains(body, mode.ready)
			})
			if code, body := get(t, base+"/healthz"); code != http.StatusOK || !strings.Contains(body, `"alive":true`) {
				t.Errorf("/healthz: %d %s", code, body)
			}
			if mode.name == "cdc" {
				// Events committed during the backfill are published twice.
				testenv.WaitBackfilled(t, pool, table, table+"_cdc")
			}

			tx, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, id := range []string{"h-1", "h-2", "h-3"} {
				if _, err := ob.Publish(ctx, tx, warrenpkg.Event{ID: id, Type: "workitem.created"}); err != nil {
					t.Fatal(err)
				}
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			lines := append(mode.metrics(table), "go_goroutines")
			var body string
			testenv.WaitFor(t, 60*time.Second, "the published counter on /metrics", func() bool {
				_, body = get(t, base+"/metrics")
				return strings.Contains(body, lines[0])
			})
			for _, line := range lines[1:] {
				if !strings.Contains(body, line) {
					t.Errorf("/metrics lacks %q", line)
				}
			}

			cancel()
			<-finished
			if r.code != 0 {
				t.Fatalf("relay run: exit %d\n%s%s", r.code, r.stdout, r.stderr)
			}
			if code, _ := get(t, base+"/healthz"); code != 0 {
				t.Errorf("/healthz still answers %d after the command returned", code)
			}
		})
	}
}

// TestRelayRunHealthAddrTaken: an address already in use fails the
// command at once, exit status 1, before the relay starts.
func TestRelayRunHealthAddrTaken(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	environ := map[string]string{"DATABASE_URL": testenv.DatabaseURL(t), "WARREN_OUTBOX_TABLE": testenv.Name(t, "ob"), "AMQP_URL": testenv.AMQPURL(t)}
	r := runOutboxCLI(context.Background(), environ, "relay", "run", "--health-addr", ln.Addr().String())
	if r.code != 1 || !strings.Contains(r.stderr, "--health-addr") || !strings.Contains(r.stderr, "address already in use") {
		t.Errorf("exit %d, stderr %q; want 1 and the address error", r.code, r.stderr)
	}
}
