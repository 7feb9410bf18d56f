package consumer_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/consumer"
	"github.com/warrenmq/warren/internal/testenv"
)

// An operator deletes the retry tier while the consumer runs. The next
// retry declares it again and goes through: the message is handled a
// second time, and is not requeued in a loop meanwhile.
func TestDeletedRetryTierIsDeclaredAgain(t *testing.T) {
	rec := newRecorder()
	c := newConsumer(t, func(cfg *consumer.Config) { cfg.RetryDelays = []time.Duration{100 * time.Millisecond} })
	c.HandleFunc("", func(ctx context.Context, m *warren.Message) error {
		rec.record(m)
		if m.Attempt == 1 {
			return errBoom
		}
		return nil
	})
	start(t, c)
	ch := testenv.Channel(t)
	if _, err := ch.QueueDelete(c.Topology().Retry[0].Queue, false, false, false); err != nil {
		t.Fatal(err)
	}
	newPublisher(t).events(c.Topology().Exchange, "", event("flaky", "workitem.updated"))
	testenv.WaitFor(t, 20*time.Second, "the second attempt, through the tier", func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return slices.Contains(rec.attempts["flaky"], 2)
	})
	if s := c.Stats(); s.Retried != 1 || s.Requeued > 1 {
		t.Errorf("stats %+v, want one retry and at most one requeue", s)
	}
	if n := rec.count("flaky"); n != 2 {
		t.Errorf("handled %d times, want 2", n)
	}
}

// An operator deletes the DLQ while the consumer runs. The next dead
// letter declares it (and its binding) again and lands in it.
func TestDeletedDLQIsDeclaredAgain(t *testing.T) {
	c := newConsumer(t, nil)
	c.HandleFunc("", func(ctx context.Context, m *warren.Message) error {
		return warren.Permanent(errBoom)
	})
	start(t, c)
	conn := testenv.AMQPConn(t)
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDelete(c.Topology().DLQ, false, false, false); err != nil {
		t.Fatal(err)
	}
	newPublisher(t).events(c.Topology().Exchange, "", event("doomed", "workitem.updated"))
	testenv.WaitFor(t, 20*time.Second, "the dead letter in a DLQ declared again", func() bool {
		probe, err := conn.Channel() // a failed passive declare closes its channel
		if err != nil {
			t.Fatal(err)
		}
		defer probe.Close()
		q, err := probe.QueueDeclarePassive(c.Topology().DLQ, false, false, false, false, nil)
		return err == nil && q.Messages == 1
	})
	if d := getOne(t, ch, c.Topology().DLQ, 5*time.Second); d.MessageId != "doomed" {
		t.Fatalf("the DLQ holds %q", d.MessageId)
	}
	if s := c.Stats(); s.DeadLettered != 1 || s.Requeued > 1 {
		t.Errorf("stats %+v, want one dead letter and at most one requeue", s)
	}
}
