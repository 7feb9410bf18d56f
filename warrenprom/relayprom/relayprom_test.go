package relayprom_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/warrenmq/warren/outbox"
	"github.com/warrenmq/warren/relay"
	"github.com/warrenmq/warren/warrenprom/relayprom"
)

// TestObserverMapsEvents checks what each relay.Observer call becomes; the
// end-to-end count against a real relay is in warrenprom's
// TestScrapeAfterKnownWorkload.
func TestObserverMapsEvents(t *testing.T) {
	reg := prometheus.NewRegistry()
	rm, err := relayprom.NewRelayMetrics(reg, relayprom.RelayOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rm.Published("t1", relay.Publication{InsertedAt: time.Now().Add(-2 * time.Second), Took: 3 * time.Millisecond})
	rm.Published("t1", relay.Publication{InsertedAt: time.Now().Add(time.Hour), Took: time.Millisecond}) // database clock ahead
	rm.Published("t1", relay.Publication{InsertedAt: time.Now(), Took: time.Second, Err: errors.New("nacked")})
	rm.Dead("t1", 2)
	rm.Woken("t1", true)
	rm.Woken("t1", false)
	rm.Woken("t1", false)
	rm.OutboxStats("t1", outbox.Stats{Pending: 7, InFlight: 2, Retrying: 1, Dead: 3, Lapsed: 5, Delivered: 4, OldestPendingAge: 90 * time.Second, CaptureErrors: 2})

	want := `
# HELP warren_relay_published_total Rows whose message the broker confirmed and routed.
# TYPE warren_relay_published_total counter
warren_relay_published_total{outbox="t1"} 2
# HELP warren_relay_publish_failures_total Publishes not confirmed: nacked, returned as unroutable, timed out or lost with the channel. The row is retried.
# TYPE warren_relay_publish_failures_total counter
warren_relay_publish_failures_total{outbox="t1"} 1
# HELP warren_relay_dead_rows_total Rows that became dead: attempts spent, or the event cannot be published.
# TYPE warren_relay_dead_rows_total counter
warren_relay_dead_rows_total{outbox="t1"} 2
# HELP warren_relay_wakeups_total Worker wake-ups to claim rows, by source: notify (LISTEN/NOTIFY) or poll (timer).
# TYPE warren_relay_wakeups_total counter
warren_relay_wakeups_total{outbox="t1",source="notify"} 1
warren_relay_wakeups_total{outbox="t1",source="poll"} 2
# HELP warren_outbox_pending_rows Rows not yet delivered or dead, in-flight and retrying rows included.
# TYPE warren_outbox_pending_rows gauge
warren_outbox_pending_rows{outbox="t1"} 7
# HELP warren_outbox_lapsed_rows Pending rows whose claim's lease ended before the claim was settled: a relay (or Plane's poller) died or stalled holding them, or, on a Plane table, a retry fell due. A relay takes them over.
# TYPE warren_outbox_lapsed_rows gauge
warren_outbox_lapsed_rows{outbox="t1"} 5
# HELP warren_outbox_oldest_pending_age_seconds How long the oldest pending row has waited; 0 when none.
# TYPE warren_outbox_oldest_pending_age_seconds gauge
warren_outbox_oldest_pending_age_seconds{outbox="t1"} 90
# HELP warren_outbox_capture_errors Changes whose events a capture trigger with the record policy could not write (rows of the outbox's capture errors table); 0 without that table.
# TYPE warren_outbox_capture_errors gauge
warren_outbox_capture_errors{outbox="t1"} 2
`
	err = testutil.GatherAndCompare(reg, strings.NewReader(want), "warren_relay_published_total", "warren_relay_publish_failures_total",
		"warren_relay_dead_rows_total", "warren_relay_wakeups_total", "warren_outbox_pending_rows", "warren_outbox_lapsed_rows", "warren_outbox_oldest_pending_age_seconds",
		"warren_outbox_capture_errors")
	if err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(reg, "warren_relay_publish_confirm_seconds"); n != 1 {
		t.Errorf("confirm histogram series: %d", n)
	}
	// Three verdicts timed; two confirmed rows in the latency histogram,
	// the one from the future at 0.
	hist := map[string]uint64{}
	families, _ := reg.Gather()
	for _, f := range families {
		for _, m := range f.GetMetric() {
			if h := m.GetHistogram(); h != nil {
				hist[f.GetName()] = h.GetSampleCount()
				if f.GetName() == "warren_relay_outbox_latency_seconds" && (h.GetSampleSum() < 2 || h.GetSampleSum() > 3) {
					t.Errorf("latency sum %v, want about 2s (the future row counted as 0)", h.GetSampleSum())
				}
			}
		}
	}
	if hist["warren_relay_publish_confirm_seconds"] != 3 || hist["warren_relay_outbox_latency_seconds"] != 2 {
		t.Errorf("histogram counts %v, want 3 confirm and 2 latency samples", hist)
	}
}

// TestBlockedGauge follows the relay.BlockObserver calls: 0 from the
// outbox's first event, 1 while blocked, 0 again once unblocked.
func TestBlockedGauge(t *testing.T) {
	reg := prometheus.NewRegistry()
	rm, err := relayprom.NewRelayMetrics(reg, relayprom.RelayOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := func(v string) {
		t.Helper()
		err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP warren_relay_connection_blocked 1 while the broker blocks the relay's connection (a memory or disk alarm: the relay claims nothing), else 0.
# TYPE warren_relay_connection_blocked gauge
warren_relay_connection_blocked{outbox="t1"} `+v+"\n"), "warren_relay_connection_blocked")
		if err != nil {
			t.Error(err)
		}
	}
	rm.Woken("t1", false)
	want("0")
	rm.Blocked("t1", "low on memory")
	want("1")
	rm.Unblocked("t1")
	want("0")
}

// TestHeldBackGauges follows the relay.HoldObserver and QueueObserver
// calls: each watched queue's depth and consumers, and which queue holds
// the relay back.
func TestHeldBackGauges(t *testing.T) {
	reg := prometheus.NewRegistry()
	rm, err := relayprom.NewRelayMetrics(reg, relayprom.RelayOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := func(held, ready string) {
		t.Helper()
		err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP warren_relay_held_back 1 while a consumer's queue (label queue) at its high-water mark holds the relay back (relay.Config.HoldBack: it claims nothing, the backlog waits in the outbox), else 0.
# TYPE warren_relay_held_back gauge
warren_relay_held_back{outbox="t1",queue="slow"} `+held+`
# HELP warren_relay_queue_ready_messages Messages waiting for a consumer in a queue the relay's HoldBack watches: the consumer's lag, in events.
# TYPE warren_relay_queue_ready_messages gauge
warren_relay_queue_ready_messages{outbox="t1",queue="slow"} `+ready+"\n"), "warren_relay_held_back", "warren_relay_queue_ready_messages")
		if err != nil {
			t.Error(err)
		}
	}
	rm.QueueDepth("t1", "slow", 3, 0)
	want("0", "3")
	rm.QueueDepth("t1", "slow", 12, 0)
	rm.HeldBack("t1", "slow", 12)
	want("1", "12")
	// Another queue became the deepest: it holds the relay now.
	rm.HeldBack("t1", "slower", 20)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP warren_relay_held_back 1 while a consumer's queue (label queue) at its high-water mark holds the relay back (relay.Config.HoldBack: it claims nothing, the backlog waits in the outbox), else 0.
# TYPE warren_relay_held_back gauge
warren_relay_held_back{outbox="t1",queue="slower"} 1
`), "warren_relay_held_back"); err != nil {
		t.Error(err)
	}
	rm.Released("t1")
	rm.QueueDepth("t1", "slow", 1, 1)
	want("0", "1")
}
