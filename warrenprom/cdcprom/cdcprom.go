package cdcprom

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/warrenmq/warren/outbox"
	"github.com/warrenmq/warren/relay/cdc"
	"github.com/warrenmq/warren/warrenprom/internal/promreg"
)

// Options configures [New]. The zero value is ready to use.
type Options struct {
	// Timeout bounds each scrape's read of the slots' status from
	// Postgres, so that a database that does not answer leaves the slot
	// gauges out of a scrape rather than holding it. Default
	// DefaultTimeout.
	Timeout time.Duration
}

// DefaultTimeout is Options.Timeout's default: well under Prometheus's
// default scrape timeout of 10s.
const DefaultTimeout = 2 * time.Second

// ErrNilRegisterer is returned by [New] when given no registerer: warren
// registers nothing globally unless told to.
var ErrNilRegisterer = promreg.ErrNilRegisterer

// Metrics is a [prometheus.Collector] of the CDC relays it watches and of
// their slots. Share one among the relays of a process.
type Metrics struct {
	db      outbox.DB
	timeout time.Duration

	mu     sync.Mutex
	relays []*cdc.Relay

	streaming, active, lag, walStatus *prometheus.Desc
	statusErrors                      *prometheus.CounterVec
}

var _ prometheus.Collector = (*Metrics)(nil)

// New creates the CDC relay metrics and registers them on reg. db reads
// the slots' status at each scrape (a pool of a connection or two is
// plenty); with a nil db only the relays' own metrics are exported.
func New(reg prometheus.Registerer, db outbox.DB, opts Options) (*Metrics, error) {
	if opts.Timeout < 0 {
		return nil, fmt.Errorf("cdcprom: negative Timeout %v", opts.Timeout)
	}
	group := []string{"outbox", "slot"}
	desc := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, nil)
	}
	m := &Metrics{
		db:        db,
		timeout:   cmp.Or(opts.Timeout, DefaultTimeout),
		streaming: desc("warren_cdc_relay_streaming", "1 while one of this process's CDC relays streams the slot, else 0 (standing by, or between sessions).", group...),
		active:    desc("warren_cdc_slot_active", "1 while a relay, of any process, streams the slot, as Postgres sees it; else 0.", group...),
		lag: desc("warren_cdc_slot_lag_bytes",
			"WAL the server keeps for the slot: from the position every event before which is confirmed and trimmed to the server's current position.", group...),
		walStatus: desc("warren_cdc_slot_wal_status",
			"1 for the server's verdict on the slot's WAL (label wal_status: reserved, extended, unreserved, lost); lost means the slot cannot stream again.", append(group, "wal_status")...),
		statusErrors: promreg.CounterVec("warren_cdc_slot_status_errors_total",
			"Scrapes whose read of the slot's status failed or ran out of time; the slot gauges are left out of those scrapes.", group...),
	}
	if err := promreg.Register(reg, m); err != nil {
		return nil, err
	}
	return m, nil
}

// Watch adds r to the relays the metrics report. Relays of one group (the
// same table and slot) are reported together: streaming when one of them
// streams.
func (m *Metrics) Watch(r *cdc.Relay) {
	m.statusErrors.WithLabelValues(r.Table(), r.Slot()) // exported at 0 from now on
	m.mu.Lock()
	defer m.mu.Unlock()
	m.relays = append(m.relays, r)
}

// Describe implements [prometheus.Collector].
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{m.streaming, m.active, m.lag, m.walStatus} {
		ch <- d
	}
	m.statusErrors.Describe(ch)
}

// group is the relays of one slot, as one scrape sees them.
type group struct {
	table, slot string
	streaming   bool
}

func (m *Metrics) groups() []*group {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*group
	bySlot := map[[2]string]*group{}
	for _, r := range m.relays {
		k := [2]string{r.Table(), r.Slot()}
		g := bySlot[k]
		if g == nil {
			g = &group{table: k[0], slot: k[1]}
			bySlot[k] = g
			out = append(out, g)
		}
		g.streaming = g.streaming || r.Streaming()
	}
	return out
}

// Collect implements [prometheus.Collector]: it reads the relays' counts,
// and each slot's status from Postgres within the scrape's Timeout.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), m.timeout)
	defer cancel()
	for _, g := range m.groups() {
		ch <- prometheus.MustNewConstMetric(m.streaming, prometheus.GaugeValue, boolValue(g.streaming), g.table, g.slot)
		if m.db != nil {
			m.collectStatus(ctx, ch, g)
		}
	}
	m.statusErrors.Collect(ch)
}

// collectStatus exports the slot's gauges, or none: a slot not made yet
// has nothing to report, and one whose read failed counts an error.
func (m *Metrics) collectStatus(ctx context.Context, ch chan<- prometheus.Metric, g *group) {
	st, err := cdc.Status(ctx, m.db, g.table, g.slot)
	if errors.Is(err, pgx.ErrNoRows) {
		return
	}
	if err != nil {
		m.statusErrors.WithLabelValues(g.table, g.slot).Inc()
		return
	}
	ch <- prometheus.MustNewConstMetric(m.active, prometheus.GaugeValue, boolValue(st.Active), g.table, g.slot)
	ch <- prometheus.MustNewConstMetric(m.lag, prometheus.GaugeValue, float64(st.LagBytes), g.table, g.slot)
	if st.WALStatus != "" {
		ch <- prometheus.MustNewConstMetric(m.walStatus, prometheus.GaugeValue, 1, g.table, g.slot, st.WALStatus)
	}
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
