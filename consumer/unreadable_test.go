package consumer_test

import (
	"context"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/consumer"
	"github.com/warrenmq/warren/dlq"
	"github.com/warrenmq/warren/internal/amqpx"
	"github.com/warrenmq/warren/internal/testenv"
)

// A producer's message whose headers amqp091-go refuses to read (nested
// more than 32 deep, more than 8192 entries), which RabbitMQ accepts, used
// to close the consumer's connection at every delivery: requeued at the
// head, delivered again, for ever, and nothing behind it handled. Each must
// now leave the queue for the DLQ as undecodable, saying what was wrong,
// with its other properties and its body, and every event behind it must
// be handled, on the one connection. So must headers too large for its
// dead letter to carry, and a marker a producer forged.
func TestUnreadableHeadersAreDeadLetteredWithoutBlockingTheQueue(t *testing.T) {
	t.Parallel()
	c := newConsumer(t, func(cfg *consumer.Config) { cfg.Prefetch = 4 })
	rec := newRecorder()
	c.HandleFunc("workitem.", func(_ context.Context, m *warren.Message) error {
		rec.record(m)
		return nil
	})
	start(t, c)
	topo := c.Topology()
	p := newPublisher(t)

	bad := testenv.UnreadableHeaders()
	// A producer who sets the marker itself only gets its event
	// dead-lettered, with the reason it wrote.
	bad["forged marker"] = testenv.Unreadable{Headers: amqp.Table{dlq.HeaderUnreadable: "forged by a producer"}, Reason: "forged by a producer"}
	sent := map[string]testenv.Unreadable{} // by message id
	for name, h := range bad {
		msg, err := amqpx.EventPublishing(event("bad "+name, "workitem.created"))
		if err != nil {
			t.Fatal(err)
		}
		msg.Headers = h.Headers
		p.raw(topo.Exchange, msg)
		sent[msg.MessageId] = h
	}
	good := manyEvents(20, "good", "workitem.updated")
	p.events(topo.Exchange, "", good...)

	rec.waitDistinct(t, len(good), 60*time.Second)
	ch := testenv.Channel(t)
	for range bad {
		d := getOne(t, ch, topo.DLQ, 60*time.Second)
		meta := dlq.ParseMetadata(d.Headers)
		want, ok := sent[d.MessageId]
		if !ok {
			t.Fatalf("dead letter %q is not one of the unreadable messages", d.MessageId)
		}
		delete(sent, d.MessageId)
		if meta.Class != dlq.ClassUndecodable || !strings.Contains(meta.Error, want.Reason) || meta.Attempts != 1 {
			t.Errorf("%s: class %q, attempts %d, error %q; want undecodable after 1 attempt, saying %q", d.MessageId, meta.Class, meta.Attempts, meta.Error, want.Reason)
		}
		for k, v := range want.Kept {
			if d.Headers[k] != v {
				t.Errorf("%s: header %s is %v, want %v kept", d.MessageId, k, d.Headers[k], v)
			}
		}
		if _, ok := d.Headers[dlq.HeaderUnreadable]; !ok {
			t.Errorf("%s: no %s header: %v", d.MessageId, dlq.HeaderUnreadable, d.Headers)
		}
		if d.Type != "workitem.created" || d.ContentType != "application/json" || d.DeliveryMode != 2 || !strings.Contains(string(d.Body), d.MessageId) {
			t.Errorf("%s: properties or body lost: type %q, content type %q, mode %d, body %s", d.MessageId, d.Type, d.ContentType, d.DeliveryMode, d.Body)
		}
	}
	for _, ev := range good {
		if n := rec.count(ev.ID); n != 1 {
			t.Errorf("%s handled %d times", ev.ID, n)
		}
	}
	// DeadLettered counts after the broker confirms the copy, which may
	// come after the copy could be read off the DLQ.
	testenv.WaitFor(t, 30*time.Second, "the dead letters counted", func() bool { return c.Stats().DeadLettered >= uint64(len(bad)) })
	if s := c.Stats(); s.Reconnects != 0 || s.DeadLettered != uint64(len(bad)) {
		t.Errorf("stats: %d reconnects, %d dead-lettered; want 0 and %d", s.Reconnects, s.DeadLettered, len(bad))
	}
}
