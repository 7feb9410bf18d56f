// Command webhook runs the webhook example service: it consumes the event
// stream and POSTs every event, signed, to the endpoints in WEBHOOK_URL.
//
//	WEBHOOK_URL=https://example.com/hook WEBHOOK_SECRET=s3cret go run ./examples/webhook/cmd/webhook
//
// Environment: AMQP_URL, REDIS_URL, WARREN_EXCHANGE, WARREN_QUEUE (default
// "webhook"), WARREN_ADOPT_QUEUE (true: consume a queue Plane declared as
// it is), WARREN_DLQ and WARREN_DLX (the dead-letter queue and exchange;
// default <queue>.dlq and <queue>.dlx), WARREN_QUEUE_TYPE (classic or
// quorum), WARREN_RETRY_DELAYS (the retry tiers; default 1s,10s,1m,10m),
// WEBHOOK_URL (comma-separated; "prefix|prefix=URL" limits an
// endpoint to event types), WEBHOOK_SECRET (signs for every endpoint
// without its own), WEBHOOK_SECRET_1, WEBHOOK_SECRET_2, … (the secret of
// the first, second, … endpoint of WEBHOOK_URL), HEALTH_ADDR (e.g.
// 127.0.0.1:8081, for /healthz, /readyz and Prometheus
// /metrics: the consumer's metrics and its queues' depths, which
// docs/grafana-dashboard.json charts).
package main

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"os"

	goredis "github.com/redis/go-redis/v9"

	dedupredis "github.com/warrenmq/warren/dedup/redis"
	"github.com/warrenmq/warren/examples/internal/serviceenv"
	"github.com/warrenmq/warren/examples/webhook"
	"github.com/warrenmq/warren/internal/redact"
)

func main() {
	// Redacted once here: the service's own lines too, not only those
	// the consumer writes.
	log := redact.Logger(slog.New(slog.NewJSONHandler(os.Stderr, nil)))
	if err := run(log); err != nil {
		log.Error("webhook service failed", "error", err)
		os.Exit(1)
	}
}

func run(log *slog.Logger) error {
	consumerCfg, err := serviceenv.Consumer(os.Getenv, log)
	if err != nil {
		return err
	}
	metrics, err := serviceenv.NewMetrics(&consumerCfg)
	if err != nil {
		return err
	}
	endpoints, err := webhook.ParseEndpoints(os.Getenv("WEBHOOK_URL"))
	if err != nil {
		return err
	}
	for i := range endpoints {
		endpoints[i].Secret = []byte(os.Getenv(fmt.Sprintf("WEBHOOK_SECRET_%d", i+1)))
	}
	redisURL := cmp.Or(os.Getenv("REDIS_URL"), "redis://127.0.0.1:6379/0")
	opts, err := goredis.ParseURL(redisURL)
	if err != nil {
		return fmt.Errorf("REDIS_URL %s: %w", redact.URL(redisURL), redact.Error(err, redisURL))
	}
	rdb := goredis.NewClient(opts)
	defer rdb.Close()
	store, err := dedupredis.New(rdb, dedupredis.Config{})
	if err != nil {
		return err
	}
	svc, err := webhook.New(webhook.Config{
		Consumer:  consumerCfg,
		Endpoints: endpoints,
		Secret:    []byte(os.Getenv("WEBHOOK_SECRET")),
	}, metrics.Dedup(store, cmp.Or(consumerCfg.Name, webhook.DefaultName)))
	if err != nil {
		return err
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
	return svc.RunUntilSignal(context.Background())
}
