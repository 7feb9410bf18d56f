package warrenprom_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/consumer"
	"github.com/warrenmq/warren/dedup/memory"
	"github.com/warrenmq/warren/middleware"
	"github.com/warrenmq/warren/warrenprom"
)

// A consumer service exporting its metrics, health and queue depths on
// one port.
func Example() {
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	cm, err := warrenprom.NewConsumerMetrics(reg, warrenprom.ConsumerOptions{})
	if err != nil {
		log.Fatal(err)
	}
	dm, err := warrenprom.NewDedupMetrics(reg, warrenprom.DedupOptions{})
	if err != nil {
		log.Fatal(err)
	}
	c, err := consumer.New(consumer.Config{Name: "webhook", Observer: cm})
	if err != nil {
		log.Fatal(err)
	}
	store, err := memory.New(memory.Config{}) // dedup/postgres or dedup/redis in a service with replicas
	if err != nil {
		log.Fatal(err)
	}
	c.Use(middleware.Dedup(dm.Instrument(store, "webhook"), middleware.DedupOptions{}))
	c.HandleFunc("workitem.", func(ctx context.Context, m *warren.Message) error { return nil })

	depths, err := warrenprom.NewQueueDepths(reg, warrenprom.QueueDepthOptions{}, c.Topology())
	if err != nil {
		log.Fatal(err)
	}
	go depths.Run(ctx)

	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.Handle("/", c.HealthHandler()) // /healthz and /readyz
	go http.ListenAndServe("127.0.0.1:9464", mux)
	if err := c.RunUntilSignal(ctx); err != nil {
		log.Fatal(err)
	}
}

// Instrumenting a dedup store: its claims are counted by result.
func ExampleDedupMetrics_Instrument() {
	reg := prometheus.NewRegistry()
	dm, err := warrenprom.NewDedupMetrics(reg, warrenprom.DedupOptions{})
	if err != nil {
		log.Fatal(err)
	}
	mem, err := memory.New(memory.Config{})
	if err != nil {
		log.Fatal(err)
	}
	store := dm.Instrument(mem, "webhook")
	ctx := context.Background()
	first, _ := store.Claim(ctx, "webhook:ev-1", time.Minute)
	store.Complete(ctx, first)
	store.Claim(ctx, "webhook:ev-1", time.Minute) // a redelivery: already done

	families, _ := reg.Gather()
	for _, f := range families {
		if f.GetName() != "warren_dedup_claims_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			fmt.Println(m.GetLabel()[1].GetValue(), m.GetCounter().GetValue())
		}
	}
	// Output:
	// acquired 1
	// busy 0
	// done 1
}
