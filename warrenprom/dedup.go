package warrenprom

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warrenmq/warren/dedup"
	"github.com/warrenmq/warren/warrenprom/internal/promreg"
)

// DedupOptions configures [NewDedupMetrics]. The zero value is ready to
// use.
type DedupOptions struct {
	// Buckets are the upper bounds, in seconds, of the store call
	// histogram. Default DefaultStoreBuckets.
	Buckets []float64
}

// DefaultStoreBuckets span an in-memory store to a slow database.
var DefaultStoreBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1}

// DedupMetrics counts what deduplication stores answer. It wraps a store
// ([DedupMetrics.Instrument]) rather than hooking into the middleware:
// the Store interface already is the seam.
type DedupMetrics struct {
	claims   *prometheus.CounterVec
	duration *prometheus.HistogramVec
	errors   *prometheus.CounterVec
}

// NewDedupMetrics creates the deduplication metrics and registers them
// on reg.
func NewDedupMetrics(reg prometheus.Registerer, opts DedupOptions) (*DedupMetrics, error) {
	buckets := opts.Buckets
	if len(buckets) == 0 {
		buckets = DefaultStoreBuckets
	}
	m := &DedupMetrics{
		claims: promreg.CounterVec("warren_dedup_claims_total",
			"Dedup claims by result: acquired (handle it), done (a duplicate), busy (another worker holds it).", "consumer", "result"),
		duration: promreg.HistogramVec("warren_dedup_store_duration_seconds",
			"Dedup store calls by operation: claim, complete, release.", buckets, "consumer", "op"),
		errors: promreg.CounterVec("warren_dedup_store_errors_total",
			"Dedup store calls that failed, by operation; a complete or release that lost its lease counts.", "consumer", "op"),
	}
	if err := promreg.Register(reg, m.claims, m.duration, m.errors); err != nil {
		return nil, err
	}
	return m, nil
}

// Instrument returns store with its calls counted and timed under the
// label consumer (the name of the consumer whose middleware uses it). A
// store that implements [dedup.Transactor] keeps doing so; its WithinTx
// is passed through untimed, since it includes the handler, and the
// done-mark it writes is not counted as a complete. It panics if store is
// nil, as middleware.Dedup does.
func (m *DedupMetrics) Instrument(store dedup.Store, consumer string) dedup.Store {
	if store == nil {
		panic("warrenprom: Instrument: nil dedup store")
	}
	s := &observedStore{
		next:     store,
		claim:    m.duration.WithLabelValues(consumer, "claim"),
		complete: m.duration.WithLabelValues(consumer, "complete"),
		release:  m.duration.WithLabelValues(consumer, "release"),
		claimErr: m.errors.WithLabelValues(consumer, "claim"),
		compErr:  m.errors.WithLabelValues(consumer, "complete"),
		relErr:   m.errors.WithLabelValues(consumer, "release"),
	}
	for r := dedup.Acquired; r <= dedup.Busy; r++ {
		s.results[r] = m.claims.WithLabelValues(consumer, r.String())
	}
	if tx, ok := store.(dedup.Transactor); ok {
		return &observedTxStore{observedStore: s, tx: tx}
	}
	return s
}

type observedStore struct {
	next                      dedup.Store
	results                   [dedup.Busy + 1]prometheus.Counter
	claim, complete, release  prometheus.Observer
	claimErr, compErr, relErr prometheus.Counter
}

func (s *observedStore) Claim(ctx context.Context, key string, lease time.Duration) (dedup.Claim, error) {
	start := time.Now()
	c, err := s.next.Claim(ctx, key, lease)
	s.claim.Observe(time.Since(start).Seconds())
	switch {
	case err != nil:
		s.claimErr.Inc()
	case c.Result >= dedup.Acquired && c.Result <= dedup.Busy:
		s.results[c.Result].Inc()
	}
	return c, err
}

func (s *observedStore) Complete(ctx context.Context, c dedup.Claim) error {
	return timed(s.complete, s.compErr, func() error { return s.next.Complete(ctx, c) })
}

func (s *observedStore) Release(ctx context.Context, c dedup.Claim) error {
	return timed(s.release, s.relErr, func() error { return s.next.Release(ctx, c) })
}

func timed(o prometheus.Observer, errs prometheus.Counter, call func() error) error {
	start := time.Now()
	err := call()
	o.Observe(time.Since(start).Seconds())
	if err != nil {
		errs.Inc()
	}
	return err
}

type observedTxStore struct {
	*observedStore
	tx dedup.Transactor
}

func (s *observedTxStore) WithinTx(ctx context.Context, c dedup.Claim, fn func(ctx context.Context) error) error {
	return s.tx.WithinTx(ctx, c, fn)
}
