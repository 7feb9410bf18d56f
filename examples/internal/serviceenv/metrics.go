package serviceenv

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/warrenmq/warren/consumer"
	"github.com/warrenmq/warren/dedup"
	"github.com/warrenmq/warren/internal/httpserver"
	"github.com/warrenmq/warren/warrenprom"
)

// Metrics is what a service serves on /metrics: the Go and process
// collectors, warren's consumer metrics, its dedup store's and its queue
// depths, the series docs/grafana-dashboard.json charts.
type Metrics struct {
	reg      *prometheus.Registry
	consumer *warrenprom.ConsumerMetrics
	dedup    *warrenprom.DedupMetrics
}

// NewMetrics registers the collectors and sets the consumer metrics as
// cfg's Observer: call it before the service is built from cfg.
func NewMetrics(cfg *consumer.Config) (*Metrics, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	cm, err := warrenprom.NewConsumerMetrics(reg, warrenprom.ConsumerOptions{})
	if err != nil {
		return nil, err
	}
	dm, err := warrenprom.NewDedupMetrics(reg, warrenprom.DedupOptions{})
	if err != nil {
		return nil, err
	}
	cfg.Observer = cm
	return &Metrics{reg: reg, consumer: cm, dedup: dm}, nil
}

// Dedup returns store with its calls counted and timed for the consumer
// named consumer (warren_dedup_*).
func (m *Metrics) Dedup(store dedup.Store, consumer string) dedup.Store {
	return m.dedup.Instrument(store, consumer)
}

// WatchQueues polls the depths of topo's queues (the service's
// Topology()) on url until ctx ends, on a connection of its own.
func (m *Metrics) WatchQueues(ctx context.Context, url string, log *slog.Logger, topo consumer.Topology) error {
	q, err := warrenprom.NewQueueDepths(m.reg, warrenprom.QueueDepthOptions{URL: url, Logger: log}, topo)
	if err != nil {
		return err
	}
	go func() {
		if err := q.Run(ctx); err != nil {
			log.Error("queue depth polling stopped", "error", err)
		}
	}()
	return nil
}

// Serve serves health (its /healthz and /readyz) and /metrics on addr
// until ctx ends. Listening happens now, so a taken address fails the
// service at start rather than in a log line.
func (m *Metrics) Serve(ctx context.Context, addr string, health http.Handler, log *slog.Logger) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/", health)
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}))
	srv := httpserver.New(addr, mux)
	go func() {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			log.Error("health server stopped", "error", err)
		}
	}()
	context.AfterFunc(ctx, func() { srv.Close() })
	log.Info("serving /healthz, /readyz and /metrics", "addr", ln.Addr().String())
	return nil
}
