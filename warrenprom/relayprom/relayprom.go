package relayprom

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warrenmq/warren/outbox"
	"github.com/warrenmq/warren/relay"
	"github.com/warrenmq/warren/warrenprom/internal/promreg"
)

// RelayOptions configures [NewRelayMetrics]. The zero value is ready to
// use.
type RelayOptions struct {
	// ConfirmBuckets are the upper bounds, in seconds, of the
	// publish-to-confirm histogram. Default DefaultConfirmBuckets.
	ConfirmBuckets []float64
	// LatencyBuckets are the upper bounds, in seconds, of the
	// transaction-to-confirm histogram. Default DefaultLatencyBuckets.
	LatencyBuckets []float64
}

// DefaultConfirmBuckets span a local broker's confirm to a publish timeout.
var DefaultConfirmBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

// DefaultLatencyBuckets span a relay woken by NOTIFY to rows that waited
// out retries.
var DefaultLatencyBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 1800}

// ErrNilRegisterer is returned by [NewRelayMetrics] when given no
// registerer: warren registers nothing globally unless told to.
var ErrNilRegisterer = promreg.ErrNilRegisterer

// RelayMetrics implements [relay.Observer]: set it as relay.Config.Observer.
type RelayMetrics struct {
	published, failures, dead *prometheus.CounterVec
	wakeups                   *prometheus.CounterVec
	confirm, latency          *prometheus.HistogramVec
	pending, inFlight         *prometheus.GaugeVec
	retrying, deadRows        *prometheus.GaugeVec
	lapsed                    *prometheus.GaugeVec
	delivered, oldest         *prometheus.GaugeVec
	captureErrors             *prometheus.GaugeVec
	blocked                   *prometheus.GaugeVec
	heldBack, queueReady      *prometheus.GaugeVec
	queueConsumers            *prometheus.GaugeVec

	outboxes sync.Map // table → *relaySeries
}

var (
	_ relay.Observer      = (*RelayMetrics)(nil)
	_ relay.BlockObserver = (*RelayMetrics)(nil)
	_ relay.HoldObserver  = (*RelayMetrics)(nil)
	_ relay.QueueObserver = (*RelayMetrics)(nil)
)

// NewRelayMetrics creates the relay and outbox metrics and registers them
// on reg. Share one among the relays of a process.
func NewRelayMetrics(reg prometheus.Registerer, opts RelayOptions) (*RelayMetrics, error) {
	confirm, latency := opts.ConfirmBuckets, opts.LatencyBuckets
	if len(confirm) == 0 {
		confirm = DefaultConfirmBuckets
	}
	if len(latency) == 0 {
		latency = DefaultLatencyBuckets
	}
	m := &RelayMetrics{
		published: promreg.CounterVec("warren_relay_published_total", "Rows whose message the broker confirmed and routed.", "outbox"),
		failures:  promreg.CounterVec("warren_relay_publish_failures_total", "Publishes not confirmed: nacked, returned as unroutable, timed out or lost with the channel. The row is retried.", "outbox"),
		dead:      promreg.CounterVec("warren_relay_dead_rows_total", "Rows that became dead: attempts spent, or the event cannot be published.", "outbox"),
		wakeups:   promreg.CounterVec("warren_relay_wakeups_total", "Worker wake-ups to claim rows, by source: notify (LISTEN/NOTIFY) or poll (timer).", "outbox", "source"),
		confirm: promreg.HistogramVec("warren_relay_publish_confirm_seconds",
			"Time from publishing a row's message to the broker's verdict.", confirm, "outbox"),
		latency: promreg.HistogramVec("warren_relay_outbox_latency_seconds",
			"Time from the producer's transaction (the row's inserted_at, on the database clock) to the broker's confirm.", latency, "outbox"),
		pending:  promreg.GaugeVec("warren_outbox_pending_rows", "Rows not yet delivered or dead, in-flight and retrying rows included.", "outbox"),
		inFlight: promreg.GaugeVec("warren_outbox_in_flight_rows", "Pending rows leased to a relay right now.", "outbox"),
		retrying: promreg.GaugeVec("warren_outbox_retrying_rows", "Pending rows waiting out the delay after a failed attempt.", "outbox"),
		deadRows: promreg.GaugeVec("warren_outbox_dead_rows", "Dead rows, waiting for 'warren outbox redrive' or a purge.", "outbox"),
		lapsed: promreg.GaugeVec("warren_outbox_lapsed_rows",
			"Pending rows whose claim's lease ended before the claim was settled: a relay (or Plane's poller) died or stalled holding them, or, on a Plane table, a retry fell due. A relay takes them over.", "outbox"),
		delivered: promreg.GaugeVec("warren_outbox_delivered_rows", "Delivered rows kept by KeepDelivered until purged.", "outbox"),
		oldest:    promreg.GaugeVec("warren_outbox_oldest_pending_age_seconds", "How long the oldest pending row has waited; 0 when none.", "outbox"),
		captureErrors: promreg.GaugeVec("warren_outbox_capture_errors",
			"Changes whose events a capture trigger with the record policy could not write (rows of the outbox's capture errors table); 0 without that table.", "outbox"),
		blocked: promreg.GaugeVec("warren_relay_connection_blocked", "1 while the broker blocks the relay's connection (a memory or disk alarm: the relay claims nothing), else 0.", "outbox"),
		heldBack: promreg.GaugeVec("warren_relay_held_back",
			"1 while a consumer's queue (label queue) at its high-water mark holds the relay back (relay.Config.HoldBack: it claims nothing, the backlog waits in the outbox), else 0.", "outbox", "queue"),
		queueReady: promreg.GaugeVec("warren_relay_queue_ready_messages",
			"Messages waiting for a consumer in a queue the relay's HoldBack watches: the consumer's lag, in events.", "outbox", "queue"),
		queueConsumers: promreg.GaugeVec("warren_relay_queue_consumers", "Consumers of a queue the relay's HoldBack watches.", "outbox", "queue"),
	}
	err := promreg.Register(reg, m.published, m.failures, m.dead, m.wakeups, m.confirm, m.latency,
		m.pending, m.inFlight, m.retrying, m.deadRows, m.lapsed, m.delivered, m.oldest, m.captureErrors, m.blocked,
		m.heldBack, m.queueReady, m.queueConsumers)
	if err != nil {
		return nil, err
	}
	return m, nil
}

// relaySeries caches one outbox's children, so they are exported (at 0)
// from the first event on and the per-row path does no label hashing.
type relaySeries struct {
	published, failures, dead prometheus.Counter
	notify, poll              prometheus.Counter
	confirm, latency          prometheus.Observer
}

func (m *RelayMetrics) series(outbox string) *relaySeries {
	if s, ok := m.outboxes.Load(outbox); ok {
		return s.(*relaySeries)
	}
	s := &relaySeries{
		published: m.published.WithLabelValues(outbox),
		failures:  m.failures.WithLabelValues(outbox),
		dead:      m.dead.WithLabelValues(outbox),
		notify:    m.wakeups.WithLabelValues(outbox, "notify"),
		poll:      m.wakeups.WithLabelValues(outbox, "poll"),
		confirm:   m.confirm.WithLabelValues(outbox),
		latency:   m.latency.WithLabelValues(outbox),
	}
	m.blocked.WithLabelValues(outbox) // exported as 0 until blocked
	actual, _ := m.outboxes.LoadOrStore(outbox, s)
	return actual.(*relaySeries)
}

// Woken implements [relay.Observer].
func (m *RelayMetrics) Woken(outbox string, byNotify bool) {
	s := m.series(outbox)
	if byNotify {
		s.notify.Inc()
	} else {
		s.poll.Inc()
	}
}

// Published implements [relay.Observer].
func (m *RelayMetrics) Published(outbox string, p relay.Publication) {
	s := m.series(outbox)
	s.confirm.Observe(p.Took.Seconds())
	if p.Err != nil {
		s.failures.Inc()
		return
	}
	s.published.Inc()
	// inserted_at is on the database's clock: skew can make it look like
	// the future, which is no latency at all.
	s.latency.Observe(max(time.Since(p.InsertedAt), 0).Seconds())
}

// Dead implements [relay.Observer].
func (m *RelayMetrics) Dead(outbox string, n int) {
	m.series(outbox).dead.Add(float64(n))
}

// OutboxStats implements [relay.Observer].
func (m *RelayMetrics) OutboxStats(outbox string, st outbox.Stats) {
	m.series(outbox)
	m.pending.WithLabelValues(outbox).Set(float64(st.Pending))
	m.inFlight.WithLabelValues(outbox).Set(float64(st.InFlight))
	m.retrying.WithLabelValues(outbox).Set(float64(st.Retrying))
	m.deadRows.WithLabelValues(outbox).Set(float64(st.Dead))
	m.lapsed.WithLabelValues(outbox).Set(float64(st.Lapsed))
	m.delivered.WithLabelValues(outbox).Set(float64(st.Delivered))
	m.oldest.WithLabelValues(outbox).Set(st.OldestPendingAge.Seconds())
	m.captureErrors.WithLabelValues(outbox).Set(float64(st.CaptureErrors))
}

// Blocked implements [relay.BlockObserver].
func (m *RelayMetrics) Blocked(outbox, _ string) {
	m.series(outbox)
	m.blocked.WithLabelValues(outbox).Set(1)
}

// Unblocked implements [relay.BlockObserver].
func (m *RelayMetrics) Unblocked(outbox string) {
	m.blocked.WithLabelValues(outbox).Set(0)
}

// HeldBack implements [relay.HoldObserver]: the queue that holds the
// relay back is at 1, the one before it (the deepest changed) no longer.
func (m *RelayMetrics) HeldBack(outbox, queue string, _ int) {
	m.series(outbox)
	m.heldBack.DeletePartialMatch(prometheus.Labels{"outbox": outbox})
	m.heldBack.WithLabelValues(outbox, queue).Set(1)
}

// Released implements [relay.HoldObserver]: every queue's series goes to 0.
func (m *RelayMetrics) Released(outbox string) {
	m.heldBack.DeletePartialMatch(prometheus.Labels{"outbox": outbox})
}

// QueueDepth implements [relay.QueueObserver]. A queue watched is exported
// as not holding the relay back until it does.
func (m *RelayMetrics) QueueDepth(outbox, queue string, ready, consumers int) {
	m.series(outbox)
	m.queueReady.WithLabelValues(outbox, queue).Set(float64(ready))
	m.queueConsumers.WithLabelValues(outbox, queue).Set(float64(consumers))
	m.heldBack.WithLabelValues(outbox, queue).Add(0)
}
