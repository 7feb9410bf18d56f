package consumer_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/cloudevents"
	"github.com/warrenmq/warren/consumer"
	"github.com/warrenmq/warren/dlq"
	"github.com/warrenmq/warren/internal/amqpx"
	"github.com/warrenmq/warren/internal/testenv"
)

// A binary-mode CloudEvent as large as warren's relay publishes (its
// headers are the event) fails once, with a long error, and its retry is
// still the event: the relay's bound (amqpx.MaxContentHeader) leaves room
// for the consumer's record as well as the margin dlq.Fit keeps, so the
// retry copy keeps every cloudEvents: header. It was 8 KiB short of the
// record: the copy lost the attributes and was dead-lettered as
// undecodable, the event's id, type, source and time gone for good.
func TestARelaySizedCloudEventKeepsItsAttributesThroughARetry(t *testing.T) {
	t.Parallel()
	enc := cloudevents.Encoder{Source: "/orders", Mode: cloudevents.Binary}
	build := func(n int) (warren.Event, int) {
		ev := event("ce-big", "workitem.updated")
		ev.Extra = map[string]json.RawMessage{"blob": json.RawMessage(`"` + strings.Repeat("x", n) + `"`)}
		msg, err := amqpx.CloudEventPublishing(enc, ev)
		if err != nil {
			return ev, -1
		}
		size, err := amqpx.ContentHeaderSize(msg)
		if err != nil {
			t.Fatal(err)
		}
		return ev, size
	}
	lo, hi := 0, 200<<10
	for lo < hi { // the largest blob the relay still publishes
		mid := (lo + hi + 1) / 2
		if _, s := build(mid); s > 0 {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	ev, size := build(lo - 100) // just under the relay's limit
	t.Logf("content header %d bytes; relay limit %d", size, amqpx.MaxContentHeader)
	msg, err := amqpx.CloudEventPublishing(enc, ev)
	if err != nil {
		t.Fatalf("the relay would refuse it: %v", err)
	}

	c := newConsumer(t, func(cfg *consumer.Config) {
		cfg.MaxAttempts = 3
		cfg.RetryDelays = []time.Duration{20 * time.Millisecond}
	})
	var mu sync.Mutex
	var calls int
	c.HandleFunc("workitem.", func(ctx context.Context, m *warren.Message) error {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if calls == 1 {
			return errors.New("upstream said: " + strings.Repeat("e", 2100)) // transient, with a long error (an HTTP body): retry
		}
		return nil
	})
	start(t, c)
	if err := newPublisher(t).pub.Publish(context.Background(), c.Topology().Exchange, ev.Type, msg); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 20*time.Second, "the retry to settle", func() bool {
		s := c.Stats()
		return s.Done+s.DeadLettered > 0
	})
	mu.Lock()
	defer mu.Unlock()
	if s := c.Stats(); s.DeadLettered > 0 {
		d := getOne(t, testenv.Channel(t), c.Topology().DLQ, 10*time.Second)
		md := dlq.ParseMetadata(d.Headers)
		_, hasID := d.Headers["cloudEvents:id"]
		t.Errorf("a transient failure of a relay-published CloudEvent dead-lettered its retry: class %s, error %q, handler ran %d time(s), cloudEvents:id kept: %v, %s = %.160q",
			md.Class, md.Error, calls, hasID, dlq.HeaderDropped, d.Headers[dlq.HeaderDropped])
	}
}
