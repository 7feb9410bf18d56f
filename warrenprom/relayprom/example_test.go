package relayprom_test

import (
	"context"
	"log"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/warrenmq/warren/relay"
	"github.com/warrenmq/warren/warrenprom/relayprom"
)

// A relay run in process, with its metrics and health endpoints; 'warren
// relay run --health-addr' serves the same.
func Example() {
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	rm, err := relayprom.NewRelayMetrics(reg, relayprom.RelayOptions{})
	if err != nil {
		log.Fatal(err)
	}
	r, err := relay.New(relay.Config{DatabaseURL: "postgres://app@db/app", Observer: rm})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.Handle("/", r.HealthHandler()) // /healthz and /readyz
	go http.ListenAndServe("127.0.0.1:9464", mux)
	if err := r.Run(ctx); err != nil {
		log.Fatal(err)
	}
}
