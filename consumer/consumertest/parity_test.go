package consumertest

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"maps"
	"reflect"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/consumer"
	"github.com/warrenmq/warren/dlq"
	"github.com/warrenmq/warren/internal/amqpx"
	"github.com/warrenmq/warren/internal/testenv"
)

// Deliver reports what the consumer does: the same deliveries, sent through
// a real broker to a running consumer, end in the queues Deliver names, with
// the headers it names, and in the dispositions it names.
func TestDeliverAgreesWithTheRunningConsumer(t *testing.T) {
	t.Parallel()
	cfg := consumer.Config{
		URL:      testenv.AMQPURL(t),
		Name:     testenv.Name(t, "c"),
		Exchange: testenv.Name(t, "ex"),
		// Tiers long enough that every copy waits in its tier to be read.
		RetryDelays: []time.Duration{time.Hour, 2 * time.Hour},
		MaxAttempts: 3,
		Unhandled:   consumer.DeadLetterUnhandled,
		Logger:      slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	c, err := consumer.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	topo := c.Topology()
	testenv.CleanupQueues(t, topo.Queues()...)
	testenv.CleanupExchanges(t, topo.Exchange, topo.DLX)
	c.HandleFunc("parity.", func(ctx context.Context, m *warren.Message) error {
		switch m.Event.Type {
		case "parity.skip":
			return warren.Skip("not ours")
		case "parity.duplicate":
			return warren.Duplicate("seen")
		case "parity.fail":
			return errors.New("boom")
		case "parity.hint":
			return warren.RetryAfter(90*time.Minute, errors.New("slow down"))
		case "parity.defer":
			return warren.Defer(time.Minute, "busy")
		case "parity.unavailable":
			return warren.Unavailable(time.Minute, errors.New("store down"))
		case "parity.permanent":
			return warren.Permanent(errors.New("bad invoice"))
		}
		return nil
	})

	ev := func(id, typ string) warren.Event {
		return warren.Event{ID: id, Type: typ, EntityType: "invoice", EntityID: "inv-" + id, WorkspaceID: "w1",
			InitiatorType: warren.InitiatorUser, CreatedAt: time.Now().UTC().Truncate(time.Second)}
	}
	// A dead message moved back to the queue by hand carries the broker's
	// record of its death there, which every copy must lose.
	shovelled := map[string]any{"x-death": []any{amqp.Table{
		"queue": topo.Queue, "reason": "expired", "count": int64(1), "exchange": topo.Exchange,
		"routing-keys": []any{"parity.fail"}, "time": time.Now().UTC().Truncate(time.Second),
	}}}
	deliveries := []Delivery{
		{Event: ev("done", "parity.ok")},
		{Event: ev("skip", "parity.skip")},
		{Event: ev("duplicate", "parity.duplicate")},
		{Event: ev("retry", "parity.fail")},
		{Event: ev("retry-2", "parity.fail"), Attempt: 2},
		{Event: ev("hint", "parity.hint")},
		{Event: ev("exhausted", "parity.fail"), Attempt: 3},
		{Event: ev("shovelled", "parity.fail"), Attempt: 2, Headers: shovelled},
		{Event: ev("defer", "parity.defer"), Attempt: 2},
		{Event: ev("unavailable", "parity.unavailable")},
		{Event: ev("permanent", "parity.permanent")},
		{Event: ev("unhandled", "other.thing")},
		{Event: ev("undecodable", "parity.ok"), Body: []byte(`{"event_id": 7}`)},
	}

	// What the kit says, without the broker.
	want := map[string]Result{}
	var tally consumer.Stats
	for _, d := range deliveries {
		r := Deliver(context.Background(), c, d)
		want[d.Event.ID] = r
		switch r.Disposition {
		case consumer.Done:
			tally.Done++
		case consumer.Skipped:
			tally.Skipped++
		case consumer.Duplicate:
			tally.Duplicates++
		case consumer.Retried:
			tally.Retried++
		case consumer.Deferred:
			tally.Deferred++
		case consumer.DeadLettered:
			tally.DeadLettered++
		default:
			t.Fatalf("%s: unexpected disposition %v", d.Event.ID, r.Disposition)
		}
		if r.Unavailable {
			tally.Unavailable++
		}
	}

	// What the consumer does.
	ctx, cancel := context.WithCancel(context.Background())
	runErr := make(chan error, 1)
	go func() { runErr <- c.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-runErr; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	testenv.WaitFor(t, 60*time.Second, "the consumer to be ready", func() bool { return c.Health().Ready })

	conn := testenv.AMQPConn(t)
	pub, err := amqpx.NewPublisher(context.Background(), conn, len(deliveries))
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	for _, d := range deliveries {
		// The very delivery Deliver built, published as a producer would.
		ad := d.delivery(topo)
		msg := amqp.Publishing{Headers: ad.Headers, ContentType: ad.ContentType, DeliveryMode: ad.DeliveryMode,
			MessageId: ad.MessageId, Timestamp: ad.Timestamp, Type: ad.Type, Body: ad.Body}
		if err := pub.Publish(context.Background(), ad.Exchange, ad.RoutingKey, msg); err != nil {
			t.Fatal(err)
		}
	}
	settled := func(s consumer.Stats) uint64 {
		return s.Done + s.Skipped + s.Duplicates + s.Retried + s.Deferred + s.DeadLettered + s.Requeued
	}
	testenv.WaitFor(t, 60*time.Second, "every delivery to be settled", func() bool {
		return settled(c.Stats()) == uint64(len(deliveries))
	})

	got := c.Stats()
	if got.Done != tally.Done || got.Skipped != tally.Skipped || got.Duplicates != tally.Duplicates ||
		got.Retried != tally.Retried || got.Deferred != tally.Deferred || got.Unavailable != tally.Unavailable ||
		got.DeadLettered != tally.DeadLettered || got.Requeued != 0 {
		t.Errorf("consumer's stats %+v, Deliver's %+v", got, tally)
	}

	// The consumer counts a move only after the broker confirmed the
	// copy, so every copy is in its queue now.
	found := map[string]amqp.Delivery{}
	foundIn := map[string]string{}
	queues := []string{topo.DLQ}
	for _, r := range topo.Retry {
		queues = append(queues, r.Queue)
	}
	for _, q := range queues {
		for _, m := range testenv.Drain(t, conn, q) {
			found[m.MessageId], foundIn[m.MessageId] = m, q
		}
	}
	for id, r := range want {
		if r.Queue == "" {
			if q, ok := foundIn[id]; ok {
				t.Errorf("%s: Deliver says %v, but the consumer moved it to %s", id, r.Disposition, q)
			}
			continue
		}
		m, ok := found[id]
		if !ok {
			t.Errorf("%s: Deliver says %v to %s; the consumer moved it nowhere", id, r.Disposition, r.Queue)
			continue
		}
		if foundIn[id] != r.Queue {
			t.Errorf("%s: Deliver says %s; the consumer moved it to %s", id, r.Queue, foundIn[id])
		}
		if w, g := withoutTimes(t, id, r.Headers), withoutTimes(t, id, m.Headers); !reflect.DeepEqual(w, g) {
			t.Errorf("%s: headers differ\nDeliver:  %v\nconsumer: %v", id, w, g)
		}
	}
}

// withoutTimes drops the failure times, which are stamped when each
// decides, after checking that they are either both there or both not.
func withoutTimes(t *testing.T, id string, h map[string]any) map[string]any {
	t.Helper()
	out := maps.Clone(h)
	_, first := out[dlq.HeaderFirstFailure]
	_, last := out[dlq.HeaderLastFailure]
	if first != last {
		t.Errorf("%s: first failure stamped %v, last %v", id, first, last)
	}
	delete(out, dlq.HeaderFirstFailure)
	delete(out, dlq.HeaderLastFailure)
	return out
}
