package consumer_test

import (
	"context"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/consumer"
	"github.com/warrenmq/warren/internal/testenv"
)

// A producer who may only publish to the consumer's exchange sets the
// sender-selected distribution header CC naming the consumer's own queue.
// Were it kept on the dead letter (published through the default
// exchange), the broker would copy it back into the queue, to be
// dead-lettered again, for ever. dlq.StripDeaths drops CC from every copy:
// one message, one dead letter.
func TestProducersCCDoesNotLoopItsDeadLetter(t *testing.T) {
	t.Parallel()
	c := newConsumer(t, nil)
	c.HandleFunc("workitem.", func(context.Context, *warren.Message) error { return nil })
	start(t, c)
	topo := c.Topology()
	newPublisher(t).raw(topo.Exchange, amqp.Publishing{
		Headers: amqp.Table{"CC": []any{topo.Queue}},
		Body:    []byte("not json"),
	})
	testenv.WaitFor(t, 30*time.Second, "the first dead letter", func() bool { return c.Stats().DeadLettered >= 1 })
	// One message, one dead letter: any more within a few seconds is the loop.
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		if n := c.Stats().DeadLettered; n > 1 {
			// Let it run a moment to measure the rate.
			before, at := n, time.Now()
			testenv.WaitFor(t, 10*time.Second, "more dead letters", func() bool { return c.Stats().DeadLettered > before+100 })
			rate := float64(c.Stats().DeadLettered-before) / time.Since(at).Seconds()
			t.Fatalf("one producer message was dead-lettered %d times and counting (%.0f dead letters/s); DLQ depth %d",
				c.Stats().DeadLettered, rate, testenv.QueueDepth(t, testenv.Channel(t), topo.DLQ))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// CC naming a queue that refuses publishes (x-overflow reject-publish,
// full) would have the broker nack the whole dead-letter publish, and the
// consumer requeue the message for ever. Without CC on the copy, bad input
// leaves the queue as a dead letter.
func TestProducersCCNamingARefusingQueueIsDeadLettered(t *testing.T) {
	t.Parallel()
	full := testenv.Name(t, "full")
	testenv.CleanupQueues(t, full)
	if _, err := testenv.Channel(t).QueueDeclare(full, false, false, false, false,
		amqp.Table{"x-max-length": int32(0), "x-overflow": "reject-publish"}); err != nil {
		t.Fatal(err)
	}
	c := newConsumer(t, nil)
	c.HandleFunc("workitem.", func(context.Context, *warren.Message) error { return nil })
	start(t, c)
	topo := c.Topology()
	newPublisher(t).raw(topo.Exchange, amqp.Publishing{Headers: amqp.Table{"CC": []any{full}}, Body: []byte("not json")})
	deadline := time.Now().Add(15 * time.Second)
	for c.Stats().DeadLettered == 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if s := c.Stats(); s.DeadLettered == 0 {
		t.Fatalf("after 15s the undecodable message is not dead-lettered: %d publish failures, %d requeues", s.PublishFailures, s.Requeued)
	}
}

// The same on a partitioned consumer, CC naming its partition queues: a
// dead letter keeping CC would put a copy back in every partition queue,
// doubling the copies each round. One message, one dead letter.
func TestProducersCCDoesNotLoopOnPartitions(t *testing.T) {
	t.Parallel()
	c := newConsumer(t, func(cfg *consumer.Config) { cfg.Partitions = 2 })
	c.HandleFunc("workitem.", func(context.Context, *warren.Message) error { return nil })
	start(t, c)
	topo := c.Topology()
	cc := []any{}
	for _, q := range topo.PartitionQueues {
		cc = append(cc, q)
	}
	newPublisher(t).raw(topo.Exchange, amqp.Publishing{Headers: amqp.Table{"CC": cc, warren.HeaderEntityID: "e1"}, Body: []byte("not json")})
	testenv.WaitFor(t, 30*time.Second, "the first dead letter", func() bool { return c.Stats().DeadLettered >= 1 })
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		if n := c.Stats().DeadLettered; n > 1 {
			at := time.Now()
			testenv.WaitFor(t, 10*time.Second, "more", func() bool { return c.Stats().DeadLettered > 2000 })
			ch := testenv.Channel(t)
			waiting := 0
			for _, q := range topo.PartitionQueues {
				waiting += testenv.QueueDepth(t, ch, q)
			}
			// Each dead letter puts a copy in both partition queues: the
			// copies in flight double with every round.
			t.Fatalf("one producer message dead-lettered %d times in %v, %d copies waiting in the partition queues",
				c.Stats().DeadLettered, time.Since(at).Round(time.Millisecond), waiting)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
