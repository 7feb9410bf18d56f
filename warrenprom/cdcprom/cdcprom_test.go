package cdcprom_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/relay/cdc"
	"github.com/warrenmq/warren/warrenprom/cdcprom"
)

// newGroup makes an outbox table, an exchange with a queue bound to it,
// and the cleanup of the slot the relays of the table make; it returns
// the table and the config of a relay of it.
func newGroup(t *testing.T) (*testenv.OutboxTable, cdc.Config) {
	t.Helper()
	ob := testenv.NewOutboxTable(t)
	testenv.CDCSlot(t, ob.Pool, ob.Table.Name())
	exchange, queue := testenv.Name(t, "ex"), testenv.Name(t, "q")
	testenv.CleanupExchanges(t, exchange)
	testenv.CleanupQueues(t, queue)
	ch := testenv.Channel(t)
	for _, err := range []error{
		ch.ExchangeDeclare(exchange, "fanout", true, false, false, false, nil),
		func() error { _, err := ch.QueueDeclare(queue, true, false, false, false, nil); return err }(),
		ch.QueueBind(queue, "", exchange, false, nil),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	return ob, cdc.Config{Pool: ob.Pool, AMQPURL: testenv.AMQPURL(t), Exchange: exchange, Table: ob.Table.Name(), Name: testenv.Name(t, "relay")}
}

// scrape is one scrape's series of one slot: a metric's name (with
// ",wal_status" appended for that gauge) to its value.
type scrape map[string]float64

func gather(t *testing.T, reg *prometheus.Registry, table, slot string) scrape {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	out := scrape{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["outbox"] != table || labels["slot"] != slot {
				continue
			}
			name := f.GetName()
			if s, ok := labels["wal_status"]; ok {
				name += "," + s
			}
			switch {
			case m.GetCounter() != nil:
				out[name] = m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				out[name] = m.GetGauge().GetValue()
			}
		}
	}
	return out
}

// The metrics follow a relay: its counts and its slot while it streams,
// then, once it stopped, a slot that is inactive and falls behind while
// rows wait in the table.
func TestMetricsFollowARelay(t *testing.T) {
	ob, cfg := newGroup(t)
	table := ob.Table.Name()
	r, err := cdc.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	m, err := cdcprom.New(reg, ob.Pool, cdcprom.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m.Watch(r)
	slot := r.Slot()
	s := gather(t, reg, table, slot)
	if len(s) != 2 || s["warren_cdc_relay_streaming"] != 0 || s["warren_cdc_slot_status_errors_total"] != 0 {
		t.Errorf("before the relay ran (no slot yet): %v, want not streaming, no errors and no slot gauges", s)
	}

	ob.PublishN("before-slot", 5) // published by the backfill
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	stop := func() {
		if cancel != nil {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("run: %v", err)
			}
			cancel = nil
		}
	}
	t.Cleanup(stop)
	testenv.WaitFor(t, 30*time.Second, "the relay to stream", func() bool {
		s = gather(t, reg, table, slot)
		return s["warren_cdc_relay_streaming"] == 1 && s["warren_cdc_slot_active"] == 1
	})
	// At least once: the counts are lower bounds (an event is published
	// again after a session that ended before trimming it).
	published := func(atLeast int64) func() bool {
		return func() bool { return r.Published() >= atLeast && ob.Count("true") == 0 }
	}
	testenv.WaitBackfilled(t, ob.Pool, table, slot)
	testenv.WaitFor(t, 30*time.Second, "the backfill's 5 events published", published(5))
	ob.PublishN("streamed", 20)
	testenv.WaitFor(t, 30*time.Second, "25 events published", published(25))
	s = gather(t, reg, table, slot) // after the table was seen empty
	if s["warren_cdc_slot_status_errors_total"] != 0 || r.Dead() != 0 {
		t.Errorf("a relay that published everything: %v", s)
	}
	walStatuses := 0
	for _, st := range []string{"reserved", "extended", "unreserved", "lost"} {
		if v, ok := s["warren_cdc_slot_wal_status,"+st]; ok && v == 1 {
			walStatuses++
		}
	}
	if walStatuses != 1 {
		t.Errorf("want one wal_status series at 1: %v", s)
	}

	stop()
	testenv.WaitFor(t, 30*time.Second, "the slot to be inactive", func() bool {
		s = gather(t, reg, table, slot)
		return s["warren_cdc_relay_streaming"] == 0 && s["warren_cdc_slot_active"] == 0
	})
	before := s["warren_cdc_slot_lag_bytes"]
	ob.PublishN("while-stopped", 50)
	s = gather(t, reg, table, slot)
	if s["warren_cdc_slot_lag_bytes"] <= before {
		t.Errorf("50 events written while no relay streams: lag %v bytes (was %v), want it to grow", s["warren_cdc_slot_lag_bytes"], before)
	}
}

// A slot whose status cannot be read (here: its table does not exist) is
// counted as an error and its gauges are left out, while whether the
// relays stream is still exported; two relays of one group are one series.
func TestFailedStatusReadIsCounted(t *testing.T) {
	pool := testenv.PgPool(t)
	reg := prometheus.NewRegistry()
	m, err := cdcprom.New(reg, pool, cdcprom.Options{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	cfg := cdc.Config{Pool: pool, Table: testenv.Name(t, "gone"), Slot: testenv.Name(t, "slot")}
	for range 2 {
		r, err := cdc.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		m.Watch(r)
	}
	for want := 1.0; want <= 2; want++ {
		s := gather(t, reg, cfg.Table, cfg.Slot)
		if len(s) != 2 || s["warren_cdc_slot_status_errors_total"] != want || s["warren_cdc_relay_streaming"] != 0 {
			t.Errorf("scrape %v: %v, want not streaming and %v status errors", want, s, want)
		}
	}
}

// New refuses no registerer and a negative timeout.
func TestNewChecksItsArguments(t *testing.T) {
	if _, err := cdcprom.New(nil, nil, cdcprom.Options{}); !errors.Is(err, cdcprom.ErrNilRegisterer) {
		t.Errorf("nil registerer: %v", err)
	}
	if _, err := cdcprom.New(prometheus.NewRegistry(), nil, cdcprom.Options{Timeout: -time.Second}); err == nil {
		t.Error("a negative timeout was accepted")
	}
}
