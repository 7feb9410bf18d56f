package cdcprom_test

import (
	"context"
	"log"
	"net/http"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/warrenmq/warren/relay/cdc"
	"github.com/warrenmq/warren/warrenprom/cdcprom"
	"github.com/warrenmq/warren/warrenprom/relayprom"
)

// A CDC relay run in process, with its metrics and health endpoints, as
// 'warren relay run --mode cdc --health-addr' serves them: relayprom
// counts what both relays report (publishes, dead rows, the table's
// gauges, which the alerts use), cdcprom the slot.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://app@db/app")
	if err != nil {
		log.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	m, err := cdcprom.New(reg, pool, cdcprom.Options{})
	if err != nil {
		log.Fatal(err)
	}
	relayMetrics, err := relayprom.NewRelayMetrics(reg, relayprom.RelayOptions{})
	if err != nil {
		log.Fatal(err)
	}
	r, err := cdc.New(cdc.Config{Pool: pool, Observer: relayMetrics})
	if err != nil {
		log.Fatal(err)
	}
	m.Watch(r)
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.Handle("/", r.HealthHandler()) // /healthz and /readyz
	go http.ListenAndServe("127.0.0.1:9464", mux)
	if err := r.Run(ctx); err != nil {
		log.Fatal(err)
	}
}
