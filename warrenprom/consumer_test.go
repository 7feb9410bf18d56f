package warrenprom_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/consumer"
	"github.com/warrenmq/warren/dlq"
	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/warrenprom"
)

// TestReconnectsAreCounted kills a consumer's connection and checks the
// connection metrics follow: one reconnect, connected again.
func TestReconnectsAreCounted(t *testing.T) {
	reg := prometheus.NewRegistry()
	cm, err := warrenprom.NewConsumerMetrics(reg, warrenprom.ConsumerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	metrics := serve(t, reg)
	name := testenv.Name(t, "c")
	c, err := consumer.New(consumer.Config{
		URL: testenv.AMQPURL(t), Name: name, Exchange: testenv.Name(t, "ex"), Observer: cm,
		ReconnectMaxDelay: 100 * time.Millisecond, Logger: testLogger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	c.HandleFunc("", func(context.Context, *warren.Message) error { return nil })
	startConsumer(t, c)
	cn := lbl("consumer", name)
	expect(t, metrics.scrape(), map[string]float64{
		"warren_consumer_connected{" + cn + "}":        1,
		"warren_consumer_reconnects_total{" + cn + "}": 0,
	})

	if n := testenv.CloseConnections(t, name); n != 1 {
		t.Fatalf("closed %d connections named after the consumer, want 1", n)
	}
	testenv.WaitFor(t, 60*time.Second, "a reconnect", func() bool {
		s := metrics.scrape()
		return s.sum("warren_consumer_reconnects_total", cn) == 1 && s.sum("warren_consumer_connected", cn) == 1
	})
	if got := c.Stats().Reconnects; got != 1 {
		t.Errorf("Stats().Reconnects = %d, want 1 like the metric", got)
	}
}

// TestEventTypeLabelIsBounded feeds the observer more event types than it
// admits, and hostile ones: past the cap they are "other", undecodable
// bodies "unknown".
func TestEventTypeLabelIsBounded(t *testing.T) {
	reg := prometheus.NewRegistry()
	cm, err := warrenprom.NewConsumerMetrics(reg, warrenprom.ConsumerOptions{MaxEventTypes: 2})
	if err != nil {
		t.Fatal(err)
	}
	metrics := serve(t, reg)
	settle := func(eventType string, d consumer.Disposition) {
		cm.Received("c1")
		st := consumer.Settlement{EventType: eventType, Disposition: d, HandlerDuration: time.Millisecond}
		if d == consumer.DeadLettered {
			st.Class = dlq.ClassPermanent
		}
		cm.Settled("c1", st)
	}
	settle("a.created", consumer.Done)
	settle("b.created", consumer.Done)
	settle("a.created", consumer.Retried)
	settle("c.created", consumer.Done)               // third type: over the cap
	settle("d.created", consumer.DeadLettered)       // fourth
	settle("\xff\xfe", consumer.Done)                // not UTF-8
	settle(string(make([]byte, 200)), consumer.Done) // too long
	settle("", consumer.DeadLettered)                // undecodable

	ct := func(eventType, outcome string) string {
		return `warren_consumer_messages_total{consumer="c1",event_type="` + eventType + `",outcome="` + outcome + `"}`
	}
	got := metrics.scrape()
	expect(t, got, map[string]float64{
		ct("a.created", "done"):                         1,
		ct("a.created", "retried"):                      1,
		ct("b.created", "done"):                         1,
		ct("other", "done"):                             3,
		ct("other", "dead_lettered"):                    1,
		ct("unknown", "dead_lettered"):                  1,
		`warren_consumer_received_total{consumer="c1"}`: 8,
		`warren_consumer_in_flight{consumer="c1"}`:      0,
		`warren_consumer_dead_letters_total{class="permanent",consumer="c1",event_type="other"}`: 1,
	})
	for k := range got {
		if eventType := between(k, `event_type="`, `"`); eventType != "" &&
			eventType != "a.created" && eventType != "b.created" && eventType != "other" && eventType != "unknown" {
			t.Errorf("series %s has an event_type beyond the cap", k)
		}
	}
}

func between(s, start, end string) string {
	_, rest, ok := cut(s, start)
	if !ok {
		return ""
	}
	v, _, _ := cut(rest, end)
	return v
}

func cut(s, sep string) (string, string, bool) {
	for i := 0; i+len(sep) <= len(s); i++ {
		if s[i:i+len(sep)] == sep {
			return s[:i], s[i+len(sep):], true
		}
	}
	return s, "", false
}

func TestRegistration(t *testing.T) {
	if _, err := warrenprom.NewConsumerMetrics(nil, warrenprom.ConsumerOptions{}); err != warrenprom.ErrNilRegisterer {
		t.Errorf("nil registerer: error %v, want ErrNilRegisterer", err)
	}
	reg := prometheus.NewRegistry()
	first, err := warrenprom.NewConsumerMetrics(reg, warrenprom.ConsumerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := warrenprom.NewConsumerMetrics(reg, warrenprom.ConsumerOptions{}); err == nil {
		t.Error("a second ConsumerMetrics registered on the same registry")
	}
	// The failed second registration must not have removed the first's.
	first.Received("c1")
	expect(t, serve(t, reg).scrape(), map[string]float64{`warren_consumer_received_total{consumer="c1"}`: 1})
}

// TestBlockedGauge follows the consumer.BlockObserver calls: 0 from the
// consumer's first event, 1 while blocked, 0 again once unblocked.
func TestBlockedGauge(t *testing.T) {
	reg := prometheus.NewRegistry()
	cm, err := warrenprom.NewConsumerMetrics(reg, warrenprom.ConsumerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := func(v string) {
		t.Helper()
		err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP warren_consumer_connection_blocked 1 while the broker blocks the consumer's connection (a memory or disk alarm: retries, dead letters and acks wait), else 0.
# TYPE warren_consumer_connection_blocked gauge
warren_consumer_connection_blocked{consumer="c"} `+v+"\n"), "warren_consumer_connection_blocked")
		if err != nil {
			t.Error(err)
		}
	}
	cm.Connected("c", false)
	want("0")
	cm.Blocked("c", "low on memory")
	want("1")
	cm.Unblocked("c")
	want("0")
}

// The lag gauge is the age of the latest settled event: a requeued
// delivery (not handled) and one without a created_at leave it as it was,
// and a producer's clock ahead of this host's is no lag.
func TestLagGauge(t *testing.T) {
	reg := prometheus.NewRegistry()
	cm, err := warrenprom.NewConsumerMetrics(reg, warrenprom.ConsumerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	lag := func() float64 {
		t.Helper()
		families, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range families {
			if f.GetName() == "warren_consumer_lag_seconds" {
				return f.GetMetric()[0].GetGauge().GetValue()
			}
		}
		t.Fatal("warren_consumer_lag_seconds is not exported")
		return 0
	}
	cm.Received("c")
	cm.Settled("c", consumer.Settlement{Disposition: consumer.Done, EventCreatedAt: time.Now().Add(-time.Minute)})
	if l := lag(); l < 60 || l > 120 {
		t.Errorf("lag after an event a minute old: %v s, want about 60", l)
	}
	cm.Received("c")
	cm.Settled("c", consumer.Settlement{Disposition: consumer.Requeued, EventCreatedAt: time.Now().Add(-time.Hour)})
	cm.Received("c")
	cm.Settled("c", consumer.Settlement{Disposition: consumer.DeadLettered, Class: "undecodable"})
	if l := lag(); l < 60 || l > 120 {
		t.Errorf("lag after a requeue and an undecodable body: %v s, want the minute before", l)
	}
	cm.Received("c")
	cm.Settled("c", consumer.Settlement{Disposition: consumer.Done, EventCreatedAt: time.Now().Add(time.Hour)})
	if l := lag(); l != 0 {
		t.Errorf("lag after an event from a clock an hour ahead: %v s, want 0", l)
	}
}
