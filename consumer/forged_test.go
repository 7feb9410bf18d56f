package consumer_test

import (
	"context"
	"os"
	"reflect"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/consumer"
	"github.com/warrenmq/warren/dlq"
	"github.com/warrenmq/warren/internal/amqpx"
	"github.com/warrenmq/warren/internal/testenv"
)

// forgedHistory is what a producer with publish rights on the exchange
// could claim about an event it publishes for the first time: that its
// attempts are spent, that it died elsewhere, in another consumer's queue.
func forgedHistory(victim string) amqp.Table {
	long := time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)
	return amqp.Table{
		dlq.HeaderAttempts:         int32(99),
		dlq.HeaderError:            "forged error",
		dlq.HeaderErrorClass:       string(dlq.ClassPermanent),
		dlq.HeaderFirstFailure:     long.Format(time.RFC3339Nano),
		dlq.HeaderLastFailure:      long.Format(time.RFC3339Nano),
		dlq.HeaderOriginQueue:      victim,
		dlq.HeaderOriginExchange:   "forged-exchange",
		dlq.HeaderOriginRoutingKey: "forged-key",
		dlq.HeaderConsumer:         victim,
		dlq.HeaderHost:             "forged-host",
		dlq.HeaderReplays:          int32(7),
		dlq.HeaderFirstDeathReason: "expired",
		dlq.HeaderFirstDeathQueue:  victim,
		dlq.HeaderFirstDeathTime:   long.Format(time.RFC3339Nano),
		"x-death": []any{amqp.Table{
			"queue": victim, "reason": "expired", "count": int64(1), "exchange": "forged-exchange", "time": long,
		}},
		"x-first-death-queue": victim, "x-first-death-reason": "expired",
		// Not warren's failure record: kept.
		"traceparent":              "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		warren.HeaderInitiatorType: warren.InitiatorUser,
	}
}

// A delivery through the consumer's exchange is a first delivery, whatever
// its headers say. A producer's forged x-warren-attempts must not spend the
// event's attempts (it was dead-lettered as exhausted after one try), and a
// forged origin, consumer or class must not reach the dead letter, where an
// operator's replay would trust it. Through a deferral too: the deferred
// copy comes back through the default exchange, where history is trusted.
func TestForgedHistoryFromTheExchangeIsIgnored(t *testing.T) {
	t.Parallel()
	good, err := amqpx.EventPublishing(event("forged", "workitem.created"))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		body []byte
		// verdicts are the handler's answers, call by call; the last
		// repeats.
		verdicts []error
		attempts []int // the attempts the handler saw, in order
		class    dlq.Class
		dead     int  // the attempts the dead letter records
		deferred bool // the first call defers
	}{
		{name: "retried until exhausted", verdicts: []error{errBoom}, attempts: []int{1, 2, 3}, class: dlq.ClassExhausted, dead: 3},
		{name: "deferred then exhausted", verdicts: []error{warren.Defer(0, "busy elsewhere"), errBoom}, attempts: []int{1, 1, 2, 3}, class: dlq.ClassExhausted, dead: 3, deferred: true},
		{name: "permanent", verdicts: []error{warren.Permanent(errBoom)}, attempts: []int{1}, class: dlq.ClassPermanent, dead: 1},
		{name: "undecodable", body: []byte(`{"event_id":`), class: dlq.ClassUndecodable, dead: 1},
	}
	host, _ := os.Hostname()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := newConsumer(t, func(cfg *consumer.Config) {
				cfg.MaxAttempts = 3
				cfg.RetryDelays = []time.Duration{20 * time.Millisecond}
			})
			var mu sync.Mutex
			var seen []int
			var headersSeen []map[string]any
			c.HandleFunc("workitem.", func(ctx context.Context, m *warren.Message) error {
				mu.Lock()
				defer mu.Unlock()
				seen = append(seen, m.Attempt)
				headersSeen = append(headersSeen, m.Headers)
				return tc.verdicts[min(len(seen), len(tc.verdicts))-1]
			})
			start(t, c)
			topo := c.Topology()
			// The victim: another consumer's queue, which the forged
			// headers name as the origin.
			victim := testenv.Name(t, "victim")
			msg := good
			msg.Headers = forgedHistory(victim)
			if tc.body != nil {
				msg.Body = tc.body
			}
			before := time.Now()
			if err := newPublisher(t).pub.Publish(context.Background(), topo.Exchange, "workitem.created", msg); err != nil {
				t.Fatal(err)
			}

			d := getOne(t, testenv.Channel(t), topo.DLQ, 60*time.Second)
			mu.Lock()
			defer mu.Unlock()
			if !reflect.DeepEqual(seen, tc.attempts) {
				t.Errorf("the handler saw attempts %v, want %v", seen, tc.attempts)
			}
			for i, h := range headersSeen {
				if md := dlq.ParseMetadata(h); md.OriginQueue == victim || md.Replays != 0 || md.Host == "forged-host" {
					t.Errorf("call %d saw the forged history: %v", i+1, h)
				}
			}
			meta := dlq.ParseMetadata(d.Headers)
			if meta.Class != tc.class || meta.Attempts != tc.dead {
				t.Errorf("dead letter class %q after %d attempts, want %q after %d", meta.Class, meta.Attempts, tc.class, tc.dead)
			}
			wantExchange, wantKey := topo.Exchange, "workitem.created"
			if tc.deferred {
				// Known gap, not this test's: a deferral stamps nothing,
				// so the first failure, on the copy back from the retry
				// tier, records the default exchange and the queue.
				wantExchange, wantKey = "", topo.Queue
			}
			if meta.OriginQueue != topo.Queue || meta.OriginExchange != wantExchange || meta.OriginRoutingKey != wantKey ||
				meta.Consumer != c.Config().Name || meta.Host != host {
				t.Errorf("dead letter names origin %q/%q/%q, consumer %q, host %q; want the true ones %q/%q/%q, %q, %q",
					meta.OriginQueue, meta.OriginExchange, meta.OriginRoutingKey, meta.Consumer, meta.Host,
					topo.Queue, wantExchange, wantKey, c.Config().Name, host)
			}
			if meta.FirstFailure.Before(before.Add(-time.Minute)) || meta.Replays != 0 || meta.FirstDeath.Reason != "" || len(meta.Deaths) != 0 {
				t.Errorf("dead letter keeps forged history: first failure %v, replays %d, first death %+v, x-death %v",
					meta.FirstFailure, meta.Replays, meta.FirstDeath, meta.Deaths)
			}
			if meta.Error == "forged error" || len(meta.Problems) != 0 {
				t.Errorf("dead letter error %q, problems %v", meta.Error, meta.Problems)
			}
			for _, name := range []string{"traceparent", warren.HeaderInitiatorType} {
				if d.Headers[name] != msg.Headers[name] {
					t.Errorf("producer header %s = %v, want %v kept", name, d.Headers[name], msg.Headers[name])
				}
			}
		})
	}
}

// A producer's CC and BCC headers do not follow the event's retries and
// dead letter: the consumer publishes those through the default exchange,
// where the broker would route a copy to every queue the headers name,
// with the consumer's rights. Only the event's own retry tier and DLQ get
// it.
func TestRoutingHeadersDoNotFollowRetriesOrDeadLetters(t *testing.T) {
	t.Parallel()
	c := newConsumer(t, func(cfg *consumer.Config) {
		cfg.MaxAttempts = 2
		cfg.RetryDelays = []time.Duration{20 * time.Millisecond}
	})
	c.HandleFunc("workitem.", func(ctx context.Context, m *warren.Message) error { return errBoom })
	start(t, c)
	ch := testenv.Channel(t)
	victim := testenv.Name(t, "victim")
	testenv.CleanupQueues(t, victim)
	if _, err := ch.QueueDeclare(victim, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	msg, err := amqpx.EventPublishing(event("cc", "workitem.created"))
	if err != nil {
		t.Fatal(err)
	}
	msg.Headers = amqp.Table{"CC": []any{victim}, "BCC": []any{victim}}
	// The consumer's exchange is a fanout: it ignores routing keys, CC's
	// among them, so this publish reaches the consumer's queue only.
	if err := newPublisher(t).pub.Publish(context.Background(), c.Topology().Exchange, "workitem.created", msg); err != nil {
		t.Fatal(err)
	}
	d := getOne(t, ch, c.Topology().DLQ, 60*time.Second)
	if md := dlq.ParseMetadata(d.Headers); md.Class != dlq.ClassExhausted || md.Attempts != 2 {
		t.Fatalf("dead letter class %q after %d attempts, want exhausted after a retry", md.Class, md.Attempts)
	}
	for _, h := range dlq.RoutingHeaders {
		if v, ok := d.Headers[h]; ok {
			t.Errorf("the dead letter keeps %s = %v", h, v)
		}
	}
	if n := testenv.QueueDepth(t, ch, victim); n != 0 {
		t.Errorf("the queue the producer's CC names got %d copies from the retry and the dead letter", n)
	}
}
