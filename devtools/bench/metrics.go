package main

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warrenmq/warren/consumer"
	"github.com/warrenmq/warren/warrenprom"
)

// metricsScenario measures what the Prometheus observer costs a
// BaseConsumer: the same backlog drained with metrics off (no Observer,
// the baseline) and on (warrenprom.ConsumerMetrics on a fresh registry).
func metricsScenario() scenario {
	return scenario{
		name: "metrics",
		about: fmt.Sprintf("Drain a backlog with a BaseConsumer at its defaults (prefetch %d, %d workers, no-op handler), "+
			"without and with warrenprom.ConsumerMetrics as its Observer. The baseline here is warren with metrics off, "+
			"so the ratio is the throughput kept with metrics on (target: at least 0.95).", prefetch, workers),
		variants: []variant{
			{name: "warren: metrics off", baseline: true, run: warrenConsume(nil)},
			{name: "warren: metrics on (warrenprom)", run: warrenConsume(withPrometheus)},
		},
	}
}

// withPrometheus sets a ConsumerMetrics on a registry of its own as the
// consumer's observer, as a service exporting /metrics does.
func withPrometheus(cfg *consumer.Config) {
	m, err := warrenprom.NewConsumerMetrics(prometheus.NewRegistry(), warrenprom.ConsumerOptions{})
	if err != nil {
		panic(err) // a fresh registry has nothing to collide with
	}
	cfg.Observer = m
}
