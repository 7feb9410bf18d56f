package consumer_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/consumer"
	"github.com/warrenmq/warren/internal/testenv"
)

// rosterCounter returns a function that reports the roster queue's
// consumer count, -1 while it does not exist, over one connection.
func rosterCounter(t *testing.T, queue string) func() int {
	t.Helper()
	conn := testenv.AMQPConn(t)
	return func() int {
		ch, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		defer ch.Close()
		info, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
		if err != nil {
			return -1
		}
		return info.Consumers
	}
}

// The roster queue deleted under two running replicas: both notice their
// consumer is gone, say so, declare it again and join it, and count each
// other again.
func TestPartitionsRosterDeletedIsRejoined(t *testing.T) {
	t.Parallel()
	var log *logLines
	var counted [2]atomic.Int64
	c := newConsumer(t, func(cfg *consumer.Config) {
		cfg.Partitions = 2
		cfg.QueueType = consumer.Quorum
		log = captureLog(t, cfg)
	})
	consumer.SetRebalancedHook(c, func(n int) { counted[0].Store(int64(n)) })
	cfg := c.Config()
	c2 := consumerAt(t, cfg.URL, func(c2 *consumer.Config) { *c2 = cfg })
	consumer.SetRebalancedHook(c2, func(n int) { counted[1].Store(int64(n)) })
	for _, x := range []*consumer.BaseConsumer{c, c2} {
		x.HandleFunc("", func(ctx context.Context, m *warren.Message) error { return nil })
		start(t, x)
	}
	roster := c.Topology().Replicas
	rosterConsumers := rosterCounter(t, roster)
	both := func() bool {
		return rosterConsumers() == 2 && counted[0].Load() == 2 && counted[1].Load() == 2
	}
	testenv.WaitFor(t, 30*time.Second, "two replicas on the roster, each counting two", both)

	ch := testenv.Channel(t)
	if _, err := ch.QueueDelete(roster, false, false, false); err != nil {
		t.Fatal(err)
	}
	counted[0].Store(0)
	counted[1].Store(0)
	testenv.WaitFor(t, 30*time.Second, "the roster back, with both replicas on it, each counting two", both)
	// Noticed by the broker's cancel, or by the next count (a 404) if that
	// came first.
	if !log.has("lost this replica's consumer on the roster queue") && !log.has("could not count the replicas on the roster queue") {
		t.Error("the lost roster consumer was not logged")
	}
	if !c.Health().Ready || !c2.Health().Ready {
		t.Error("a replica is not ready")
	}
}

// A roster an earlier version declared classic is adopted as it is by a
// quorum consumer, not refused for its x-queue-type.
func TestPartitionsClassicRosterAdopted(t *testing.T) {
	t.Parallel()
	var counted atomic.Int64
	counted.Store(-1)
	var log *logLines
	c := newConsumer(t, func(cfg *consumer.Config) {
		cfg.Partitions = 2
		cfg.QueueType = consumer.Quorum
		log = captureLog(t, cfg)
	})
	consumer.SetRebalancedHook(c, func(n int) { counted.Store(int64(n)) })
	ch := testenv.Channel(t)
	if _, err := ch.QueueDeclare(c.Topology().Replicas, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	c.HandleFunc("", func(ctx context.Context, m *warren.Message) error { return nil })
	start(t, c)
	testenv.WaitFor(t, 30*time.Second, "the replica counted on the classic roster", func() bool { return counted.Load() == 1 })
	// Still classic: declaring it classic again is no conflict.
	if _, err := ch.QueueDeclare(c.Topology().Replicas, true, false, false, false, amqp.Table{"x-queue-type": "classic"}); err != nil {
		t.Fatalf("the roster is no longer classic: %v", err)
	}
	if strings.Contains(log.String(), "roster queue") {
		t.Errorf("the roster was complained about:\n%s", log)
	}
}
