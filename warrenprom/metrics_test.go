package warrenprom_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/consumer"
	"github.com/warrenmq/warren/internal/amqpx"
	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/middleware"
	"github.com/warrenmq/warren/outbox"
	"github.com/warrenmq/warren/relay"
	"github.com/warrenmq/warren/warrenprom"
	"github.com/warrenmq/warren/warrenprom/relayprom"
)

func event(id, typ string) warren.Event {
	return warren.Event{
		ID: id, Type: typ, EntityType: "issue", EntityID: "e-" + id, WorkspaceID: "w1",
		InitiatorType: warren.InitiatorUser, Version: "1.0",
		Payload: warren.Payload{Data: []byte(`{"state":"done"}`), PreviousAttributes: []byte(`{"state":"todo"}`)},
	}
}

// TestScrapeAfterKnownWorkload runs a known workload from the outbox
// through a real relay, RabbitMQ and a real BaseConsumer with the dedup
// middleware, then scrapes /metrics and checks every count exactly.
//
//	relay:    12 events published, 1 oversized event dead in the outbox
//	consumer: 8 ok.created done, 3 bad.created dead-lettered (permanent),
//	          1 other.thing skipped (no handler, so it passes no
//	          middleware: no dedup claim), then 4 copies of ok events
//	          delivered again: duplicates
func TestScrapeAfterKnownWorkload(t *testing.T) {
	const done, dead, skipped, dups = 8, 3, 1, 4
	ctx := context.Background()
	table := testenv.Name(t, "ob")
	testenv.DropTables(t, table, table+"_migrations")
	pool := testenv.PgPool(t)
	outbox, err := outbox.New(table)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := outbox.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}

	reg := prometheus.NewRegistry()
	cm, err := warrenprom.NewConsumerMetrics(reg, warrenprom.ConsumerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rm, err := relayprom.NewRelayMetrics(reg, relayprom.RelayOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dm, err := warrenprom.NewDedupMetrics(reg, warrenprom.DedupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	metrics := serve(t, reg)

	name, exchange := testenv.Name(t, "c"), testenv.Name(t, "ex")
	c, err := consumer.New(consumer.Config{
		URL: testenv.AMQPURL(t), Name: name, Exchange: exchange, Observer: cm, Logger: testLogger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	c.Use(middleware.Dedup(dm.Instrument(testenv.MemoryStore(t), name), middleware.DedupOptions{}))
	c.HandleFunc("ok.", func(context.Context, *warren.Message) error { return nil })
	c.HandleFunc("bad.", func(context.Context, *warren.Message) error {
		return warren.Permanent(errors.New("refused by the test"))
	})
	started := time.Now()
	startConsumer(t, c)

	queues, err := warrenprom.NewQueueDepths(reg, warrenprom.QueueDepthOptions{
		URL: testenv.AMQPURL(t), Interval: 20 * time.Millisecond, Name: testenv.Name(t, "depths"), Logger: testLogger(t),
	}, c.Topology())
	if err != nil {
		t.Fatal(err)
	}
	testenv.RunInBackground(t, queues.Run)

	r, err := relay.New(relay.Config{
		Pool: pool, AMQPURL: testenv.AMQPURL(t), Exchange: exchange, Table: table, Name: testenv.Name(t, "relay"),
		Observer: rm, StatsInterval: 20 * time.Millisecond, MaxMessageBytes: 4096,
		PollMin: 10 * time.Millisecond, PollMax: 100 * time.Millisecond, Logger: testLogger(t),
		// Counts are exact only without a retried publish (a duplicate):
		// room for the slowest confirm a busy machine gives.
		PublishTimeout: time.Minute, Lease: 3 * time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	testenv.RunInBackground(t, r.Run)

	var evs []warren.Event
	for i := range done {
		evs = append(evs, event(fmt.Sprintf("ok-%d", i), "ok.created"))
	}
	for i := range dead {
		evs = append(evs, event(fmt.Sprintf("bad-%d", i), "bad.created"))
	}
	evs = append(evs, event("other-0", "other.thing"))
	huge := event("huge-0", "ok.created")
	huge.Payload.Data = []byte(`{"blob":"` + strings.Repeat("x", 8000) + `"}`)
	evs = append(evs, huge) // over MaxMessageBytes: dead in the outbox, never published
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := outbox.PublishBatch(ctx, tx, evs); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	settled := func(s consumer.Stats) uint64 {
		return s.Done + s.Skipped + s.Duplicates + s.Retried + s.Deferred + s.DeadLettered + s.Requeued
	}
	testenv.WaitFor(t, 60*time.Second, "the relayed events to be settled", func() bool { return settled(c.Stats()) == done+dead+skipped })

	// The same events again, straight to the exchange, as a relay that
	// published twice would send them: the dedup store knows them.
	pub, err := amqpx.NewPublisher(context.Background(), testenv.AMQPConn(t), 16)
	if err != nil {
		t.Fatal(err)
	}
	for i := range dups {
		msg, err := amqpx.EventPublishing(event(fmt.Sprintf("ok-%d", i), "ok.created"))
		if err != nil {
			t.Fatal(err)
		}
		if err := pub.Publish(ctx, exchange, "ok.created", msg); err != nil {
			t.Fatal(err)
		}
	}
	// InFlight falls last, after the Observer calls the metrics count.
	testenv.WaitFor(t, 60*time.Second, "the duplicates to be settled", func() bool {
		s := c.Stats()
		return settled(s) == done+dead+skipped+dups && s.InFlight == 0
	})

	// The relay counts a publish after its confirm, the outbox gauges and
	// the queue depths come from pollers: wait for them to catch up.
	outboxLabel, consumerLabel := lbl("outbox", table), lbl("consumer", name)
	testenv.WaitFor(t, 60*time.Second, "the relay and poller metrics", func() bool {
		s := metrics.scrape()
		return s.sum("warren_relay_published_total", outboxLabel) == done+dead+skipped &&
			s.sum("warren_relay_dead_rows_total", outboxLabel) == 1 &&
			s.sum("warren_outbox_dead_rows", outboxLabel) == 1 && s.sum("warren_outbox_pending_rows", outboxLabel) == 0 &&
			s.sum("warren_queue_messages", consumerLabel, lbl("role", "dlq")) == dead &&
			s.sum("warren_queue_messages", consumerLabel, lbl("role", "main")) == 0
	})

	got := metrics.scrape()
	cn := `{consumer="` + name + `"}`
	ct := func(eventType string, more ...string) string {
		labels := append([]string{lbl("consumer", name), lbl("event_type", eventType)}, more...)
		return "{" + strings.Join(labels, ",") + "}"
	}
	ob := `{outbox="` + table + `"}`
	want := map[string]float64{
		"warren_consumer_received_total" + cn:                                                                         done + dead + skipped + dups,
		"warren_consumer_messages_total" + ct("ok.created", lbl("outcome", "done")):                                   done,
		"warren_consumer_messages_total" + ct("ok.created", lbl("outcome", "duplicate")):                              dups,
		"warren_consumer_messages_total" + ct("bad.created", lbl("outcome", "dead_lettered")):                         dead,
		"warren_consumer_messages_total" + ct("other.thing", lbl("outcome", "skipped")):                               skipped,
		"warren_consumer_messages_total" + ct("ok.created", lbl("outcome", "retried")):                                0,
		"warren_consumer_dead_letters_total" + `{class="permanent",consumer="` + name + `",event_type="bad.created"}`: dead,
		"warren_consumer_handler_duration_seconds_count" + ct("ok.created"):                                           done + dups,
		"warren_consumer_handler_duration_seconds_count" + ct("bad.created"):                                          dead,
		"warren_consumer_handler_duration_seconds_count" + ct("other.thing"):                                          skipped,
		"warren_consumer_in_flight" + cn:                                                                              0,
		"warren_consumer_connected" + cn:                                                                              1,
		"warren_consumer_reconnects_total" + cn:                                                                       0,

		"warren_dedup_claims_total" + `{consumer="` + name + `",result="acquired"}`:             done + dead,
		"warren_dedup_claims_total" + `{consumer="` + name + `",result="done"}`:                 dups,
		"warren_dedup_claims_total" + `{consumer="` + name + `",result="busy"}`:                 0,
		"warren_dedup_store_duration_seconds_count" + `{consumer="` + name + `",op="claim"}`:    done + dead + dups,
		"warren_dedup_store_duration_seconds_count" + `{consumer="` + name + `",op="complete"}`: done,
		"warren_dedup_store_duration_seconds_count" + `{consumer="` + name + `",op="release"}`:  dead,
		"warren_dedup_store_errors_total" + `{consumer="` + name + `",op="claim"}`:              0,

		"warren_relay_published_total" + ob:               done + dead + skipped,
		"warren_relay_publish_failures_total" + ob:        0,
		"warren_relay_dead_rows_total" + ob:               1,
		"warren_relay_publish_confirm_seconds_count" + ob: done + dead + skipped,
		"warren_relay_outbox_latency_seconds_count" + ob:  done + dead + skipped,
		"warren_outbox_pending_rows" + ob:                 0,
		"warren_outbox_in_flight_rows" + ob:               0,
		"warren_outbox_dead_rows" + ob:                    1,
		"warren_outbox_oldest_pending_age_seconds" + ob:   0,
		"warren_queue_poll_errors_total" + cn:             0,
	}
	expect(t, got, want)
	// Every settled delivery is counted once, under one outcome.
	if n := got.sum("warren_consumer_messages_total", lbl("consumer", name)); n != done+dead+skipped+dups {
		t.Errorf("warren_consumer_messages_total sums to %v over all outcomes, want %d", n, done+dead+skipped+dups)
	}
	// Wake-ups depend on timing (a commit before the relay listens is
	// found by its poll); relay's TestObserverSeesNotifyWakeups counts them.
	for _, source := range []string{"notify", "poll"} {
		if _, ok := got["warren_relay_wakeups_total"+`{outbox="`+table+`",source="`+source+`"}`]; !ok {
			t.Errorf("no wake-up series for source %s", source)
		}
	}
	// The events were created by this test on this host: the consumer's
	// lag in time is between 0 and the test's age.
	if lag, ok := got["warren_consumer_lag_seconds{"+consumerLabel+"}"]; !ok || lag < 0 || lag > time.Since(started).Seconds() {
		t.Errorf("warren_consumer_lag_seconds = %v (exported: %v), want between 0 and the test's %v", lag, ok, time.Since(started))
	}
	last := got.sum("warren_consumer_last_message_timestamp_seconds", consumerLabel)
	if last < float64(started.Unix()) || last > float64(time.Now().Unix()+1) {
		t.Errorf("last message timestamp %v is not between the test's start %v and now", last, started.Unix())
	}
	// The gauges say what the broker says.
	ch := testenv.Channel(t)
	if n := testenv.QueueDepth(t, ch, c.Topology().DLQ); n != dead {
		t.Errorf("the DLQ holds %d messages, want %d", n, dead)
	}
	for _, tier := range c.Topology().Retry {
		if n := got.sum("warren_queue_messages", lbl("queue", tier.Queue), lbl("role", "retry")); n != 0 {
			t.Errorf("retry tier %s: warren_queue_messages = %v, want 0", tier.Queue, n)
		}
	}
}
