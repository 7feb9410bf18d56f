// Command automation runs the automation example service: it applies the
// rules in the automation_rules table to work-item events, writing each
// change and its follow-up event in the event's own transaction.
//
//	go run ./examples/automation/cmd/automation
//
// Environment: AMQP_URL, DATABASE_URL, WARREN_EXCHANGE, WARREN_QUEUE
// (default "automation"), WARREN_ADOPT_QUEUE (true: consume a queue Plane
// declared as it is), WARREN_DLQ and WARREN_DLX (the dead-letter queue and
// exchange; default <queue>.dlq and <queue>.dlx), WARREN_QUEUE_TYPE
// (classic or quorum), WARREN_RETRY_DELAYS (the retry tiers; default
// 1s,10s,1m,10m), WARREN_OUTBOX_TABLE,
// HEALTH_ADDR (e.g. 127.0.0.1:8082, for /healthz, /readyz and Prometheus
// /metrics: the consumer's metrics and its queues' depths, which
// docs/grafana-dashboard.json charts). Add a rule
// with SQL:
//
//	INSERT INTO automation_rules (name, when_state, set_priority) VALUES ('done is not urgent', 'done', 'none');
package main

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/warrenmq/warren/examples/app"
	"github.com/warrenmq/warren/examples/automation"
	"github.com/warrenmq/warren/examples/internal/serviceenv"
	"github.com/warrenmq/warren/internal/redact"
)

func main() {
	// Redacted once here: the service's own lines too, not only those
	// the consumer writes.
	log := redact.Logger(slog.New(slog.NewJSONHandler(os.Stderr, nil)))
	if err := run(log); err != nil {
		log.Error("automation service failed", "error", err)
		os.Exit(1)
	}
}

func run(log *slog.Logger) error {
	ctx := context.Background()
	consumerCfg, err := serviceenv.Consumer(os.Getenv, log)
	if err != nil {
		return err
	}
	metrics, err := serviceenv.NewMetrics(&consumerCfg)
	if err != nil {
		return err
	}
	dbURL := cmp.Or(os.Getenv("DATABASE_URL"), "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return redact.Error(err, dbURL)
	}
	defer pool.Close()
	a, err := app.New("", os.Getenv("WARREN_OUTBOX_TABLE"))
	if err != nil {
		return err
	}
	svc, err := automation.New(automation.Config{
		Consumer:  consumerCfg,
		WrapStore: metrics.Dedup,
	}, pool, a)
	if err != nil {
		return err
	}
	if err := a.Migrate(ctx, pool); err != nil {
		return redact.Error(err, dbURL)
	}
	if err := svc.Migrate(ctx); err != nil {
		return redact.Error(err, dbURL)
	}
	if addr := os.Getenv("HEALTH_ADDR"); addr != "" {
		// Stops with run: a test calls run more than once.
		serveCtx, stop := context.WithCancel(context.Background())
		defer stop()
		if err := metrics.Serve(serveCtx, addr, svc.HealthHandler(), log); err != nil {
			return fmt.Errorf("HEALTH_ADDR: %w", err)
		}
		if err := metrics.WatchQueues(serveCtx, consumerCfg.URL, log, svc.Topology()); err != nil {
			return err
		}
	}
	return svc.RunUntilSignal(ctx)
}
