// Package promreg registers warren's collectors for the Prometheus
// adapters (warrenprom and warrenprom/relayprom).
package promreg

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// ErrNilRegisterer is returned when no registerer was given: warren
// registers nothing globally unless told to.
var ErrNilRegisterer = errors.New("warrenprom: nil prometheus.Registerer (pass prometheus.NewRegistry(), or prometheus.DefaultRegisterer to use the global one)")

// Register registers every collector, or none: on a failure it
// unregisters those already registered.
func Register(reg prometheus.Registerer, cs ...prometheus.Collector) error {
	if reg == nil {
		return ErrNilRegisterer
	}
	for i, c := range cs {
		if err := reg.Register(c); err != nil {
			for _, done := range cs[:i] {
				reg.Unregister(done)
			}
			return fmt.Errorf("warrenprom: register: %w", err)
		}
	}
	return nil
}

// CounterVec returns a counter vector named name.
func CounterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
}

// GaugeVec returns a gauge vector named name.
func GaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
}

// HistogramVec returns a histogram vector named name with the given
// bucket upper bounds.
func HistogramVec(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels)
}
