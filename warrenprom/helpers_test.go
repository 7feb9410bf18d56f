package warrenprom_test

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/warrenmq/warren/consumer"
	"github.com/warrenmq/warren/internal/testenv"
)

// endpoint serves reg the way a service does, over HTTP, and scrapes it.
type endpoint struct {
	t   *testing.T
	url string
}

func serve(t *testing.T, reg *prometheus.Registry) *endpoint {
	t.Helper()
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.Cleanup(srv.Close)
	return &endpoint{t: t, url: srv.URL}
}

// scrape fetches the endpoint and flattens it to series → value, a series
// written name{label="value",…} with labels sorted; a histogram gives
// name_count and name_sum.
func (e *endpoint) scrape() series {
	e.t.Helper()
	resp, err := http.Get(e.url)
	if err != nil {
		e.t.Fatalf("scrape: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		e.t.Fatalf("scrape: %s", resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		e.t.Fatalf("scrape: parse: %v", err)
	}
	out := series{}
	for name, f := range families {
		for _, m := range f.GetMetric() {
			labels := key(m.GetLabel())
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				out[name+labels] = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				out[name+labels] = m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				out[name+"_count"+labels] = float64(m.GetHistogram().GetSampleCount())
				out[name+"_sum"+labels] = m.GetHistogram().GetSampleSum()
			}
		}
	}
	return out
}

func key(labels []*dto.LabelPair) string {
	parts := make([]string, len(labels))
	for i, l := range labels {
		parts[i] = fmt.Sprintf("%s=%q", l.GetName(), l.GetValue())
	}
	slices.Sort(parts)
	return "{" + strings.Join(parts, ",") + "}"
}

type series map[string]float64

// sum adds every series of the metric name whose labels include all of
// match ("label=value" pairs, written label="value").
func (s series) sum(name string, match ...string) float64 {
	total := 0.0
	for k, v := range s {
		metric, labels, _ := strings.Cut(k, "{")
		if metric != name {
			continue
		}
		ok := true
		for _, m := range match {
			if !strings.Contains(labels, m) {
				ok = false
			}
		}
		if ok {
			total += v
		}
	}
	return total
}

// lbl writes one label matcher for series.sum.
func lbl(name, value string) string { return fmt.Sprintf("%s=%q", name, value) }

// expect checks that every series in want has exactly its value.
func expect(t *testing.T, got series, want map[string]float64) {
	t.Helper()
	keys := make([]string, 0, len(want))
	for k := range want {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		v, ok := got[k]
		if !ok {
			t.Errorf("%s: missing from the scrape", k)
			continue
		}
		if v != want[k] {
			t.Errorf("%s = %v, want %v", k, v, want[k])
		}
	}
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// startConsumer runs c until t ends and waits until it consumes.
func startConsumer(t *testing.T, c *consumer.BaseConsumer) {
	t.Helper()
	topo := c.Topology()
	testenv.CleanupQueues(t, topo.Queues()...)
	testenv.CleanupExchanges(t, topo.Exchange, topo.DLX)
	testenv.RunInBackground(t, c.Run)
	testenv.WaitFor(t, 60*time.Second, "the consumer to be ready", func() bool { return c.Health().Ready })
}
