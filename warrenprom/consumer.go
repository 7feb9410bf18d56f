package warrenprom

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warrenmq/warren/consumer"
	"github.com/warrenmq/warren/warrenprom/internal/promreg"
)

// ConsumerOptions configures [NewConsumerMetrics]. The zero value is
// ready to use.
type ConsumerOptions struct {
	// MaxEventTypes is how many distinct event types get a label value of
	// their own; later ones are counted as "other". Default 50. Negative:
	// none, every event is "other" (the label stays, with one value).
	MaxEventTypes int

	// HandlerBuckets are the upper bounds, in seconds, of the handler
	// duration histogram. Default DefaultHandlerBuckets.
	HandlerBuckets []float64
}

// DefaultMaxEventTypes is ConsumerOptions.MaxEventTypes's default.
const DefaultMaxEventTypes = 50

// DefaultHandlerBuckets span a cache hit to a slow external call.
var DefaultHandlerBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

// ConsumerMetrics implements [consumer.Observer]: set it as
// consumer.Config.Observer of every consumer of the process.
type ConsumerMetrics struct {
	received    *prometheus.CounterVec
	messages    *prometheus.CounterVec
	deadLetters *prometheus.CounterVec
	handler     *prometheus.HistogramVec
	inFlight    *prometheus.GaugeVec
	lastMessage *prometheus.GaugeVec
	lag         *prometheus.GaugeVec
	connected   *prometheus.GaugeVec
	blocked     *prometheus.GaugeVec
	reconnects  *prometheus.CounterVec
	unavailable *prometheus.CounterVec

	types     *eventTypes
	consumers sync.Map // consumer name → *consumerSeries
}

var (
	_ consumer.Observer      = (*ConsumerMetrics)(nil)
	_ consumer.BlockObserver = (*ConsumerMetrics)(nil)
)

// NewConsumerMetrics creates the consumer metrics and registers them on
// reg. Registering a second ConsumerMetrics on one registerer fails: share
// one among the process's consumers.
func NewConsumerMetrics(reg prometheus.Registerer, opts ConsumerOptions) (*ConsumerMetrics, error) {
	maxTypes := opts.MaxEventTypes
	switch {
	case maxTypes == 0:
		maxTypes = DefaultMaxEventTypes
	case maxTypes < 0:
		maxTypes = 0
	}
	buckets := opts.HandlerBuckets
	if len(buckets) == 0 {
		buckets = DefaultHandlerBuckets
	}
	m := &ConsumerMetrics{
		received: promreg.CounterVec("warren_consumer_received_total",
			"Deliveries taken off the queue by a worker.", "consumer"),
		messages: promreg.CounterVec("warren_consumer_messages_total",
			"Settled deliveries by event type and outcome: done, skipped, duplicate, retried, deferred, dead_lettered, requeued.", "consumer", "event_type", "outcome"),
		deadLetters: promreg.CounterVec("warren_consumer_dead_letters_total",
			"Messages moved to the DLQ, by event type and class (permanent, exhausted, undecodable, unhandled).", "consumer", "event_type", "class"),
		handler: promreg.HistogramVec("warren_consumer_handler_duration_seconds",
			"Time spent in the middleware chain and handler, by event type.", buckets, "consumer", "event_type"),
		inFlight: promreg.GaugeVec("warren_consumer_in_flight",
			"Deliveries being handled now.", "consumer"),
		lastMessage: promreg.GaugeVec("warren_consumer_last_message_timestamp_seconds",
			"Unix time the latest delivery arrived; time() minus it is the time since the last message.", "consumer"),
		lag: promreg.GaugeVec("warren_consumer_lag_seconds",
			"How old the latest settled event was when it was settled (its created_at, on the producer's clock, to now): the consumer's lag in time. Retry delays count; clock skew between the hosts too.", "consumer"),
		connected: promreg.GaugeVec("warren_consumer_connected",
			"1 while the consumer is connected and consuming, else 0.", "consumer"),
		blocked: promreg.GaugeVec("warren_consumer_connection_blocked",
			"1 while the broker blocks the consumer's connection (a memory or disk alarm: retries, dead letters and acks wait), else 0.", "consumer"),
		reconnects: promreg.CounterVec("warren_consumer_reconnects_total",
			"Consuming sessions started after the first: connection losses recovered.", "consumer"),
		unavailable: promreg.CounterVec("warren_consumer_unavailable_total",
			"Deliveries deferred because a dependency (a dedup store) was unavailable before the handler ran; also counted as deferred. No attempt is spent.", "consumer"),
		types: newEventTypes(maxTypes),
	}
	err := promreg.Register(reg, m.received, m.messages, m.deadLetters, m.handler, m.inFlight, m.lastMessage, m.lag, m.connected, m.blocked, m.reconnects, m.unavailable)
	if err != nil {
		return nil, err
	}
	return m, nil
}

// consumerSeries caches one consumer's children of the vectors, so the
// per-message path does no label hashing.
type consumerSeries struct {
	name        string
	received    prometheus.Counter
	unavailable prometheus.Counter
	inFlight    prometheus.Gauge
	lastMessage prometheus.Gauge
	lag         prometheus.Gauge
	types       sync.Map // event type label → *typeSeries (bounded by MaxEventTypes + 2)
}

// typeSeries is one (consumer, event type)'s outcome counters, indexed by
// consumer.Disposition, and its handler histogram.
type typeSeries struct {
	label    string
	outcomes [consumer.Requeued + 1]prometheus.Counter
	duration prometheus.Observer
}

func (m *ConsumerMetrics) series(name string) *consumerSeries {
	if s, ok := m.consumers.Load(name); ok {
		return s.(*consumerSeries)
	}
	s := &consumerSeries{
		name:        name,
		received:    m.received.WithLabelValues(name),
		unavailable: m.unavailable.WithLabelValues(name),
		inFlight:    m.inFlight.WithLabelValues(name),
		lastMessage: m.lastMessage.WithLabelValues(name),
		lag:         m.lag.WithLabelValues(name),
	}
	m.connected.WithLabelValues(name) // exported as 0 until connected
	m.blocked.WithLabelValues(name)
	m.reconnects.WithLabelValues(name)
	actual, _ := m.consumers.LoadOrStore(name, s)
	return actual.(*consumerSeries)
}

func (m *ConsumerMetrics) eventType(s *consumerSeries, eventType string) *typeSeries {
	// An admitted type is cached under its own name, so the common case
	// is one lock-free lookup; only other types take eventTypes' lock.
	if t, ok := s.types.Load(eventType); ok {
		return t.(*typeSeries)
	}
	label := m.types.label(eventType)
	if t, ok := s.types.Load(label); ok {
		return t.(*typeSeries)
	}
	t := &typeSeries{label: label, duration: m.handler.WithLabelValues(s.name, label)}
	for d := consumer.Done; d <= consumer.Requeued; d++ {
		t.outcomes[d] = m.messages.WithLabelValues(s.name, label, d.String())
	}
	actual, _ := s.types.LoadOrStore(label, t)
	return actual.(*typeSeries)
}

// Received implements [consumer.Observer].
func (m *ConsumerMetrics) Received(name string) {
	s := m.series(name)
	s.received.Inc()
	s.inFlight.Inc()
	s.lastMessage.SetToCurrentTime()
}

// Settled implements [consumer.Observer].
func (m *ConsumerMetrics) Settled(name string, st consumer.Settlement) {
	s := m.series(name)
	s.inFlight.Dec()
	t := m.eventType(s, st.EventType)
	if st.Disposition >= consumer.Done && st.Disposition <= consumer.Requeued {
		t.outcomes[st.Disposition].Inc()
	}
	if st.Unavailable {
		s.unavailable.Inc()
	}
	if st.Disposition == consumer.DeadLettered {
		m.deadLetters.WithLabelValues(name, t.label, string(st.Class)).Inc()
	}
	if st.HandlerDuration > 0 {
		t.duration.Observe(st.HandlerDuration.Seconds())
	}
	if !st.EventCreatedAt.IsZero() && st.Disposition != consumer.Requeued {
		// A clock ahead of this host's is no lag at all.
		s.lag.Set(max(time.Since(st.EventCreatedAt), 0).Seconds())
	}
}

// Connected implements [consumer.Observer].
func (m *ConsumerMetrics) Connected(name string, reconnect bool) {
	m.series(name)
	m.connected.WithLabelValues(name).Set(1)
	if reconnect {
		m.reconnects.WithLabelValues(name).Inc()
	}
}

// Disconnected implements [consumer.Observer].
func (m *ConsumerMetrics) Disconnected(name string, _ error) {
	m.connected.WithLabelValues(name).Set(0)
}

// Blocked implements [consumer.BlockObserver].
func (m *ConsumerMetrics) Blocked(name, _ string) {
	m.series(name)
	m.blocked.WithLabelValues(name).Set(1)
}

// Unblocked implements [consumer.BlockObserver].
func (m *ConsumerMetrics) Unblocked(name string) {
	m.blocked.WithLabelValues(name).Set(0)
}
