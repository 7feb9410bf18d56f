package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"time"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/consumer"
)

// A service embeds BaseConsumer, registers its handlers by event-type
// prefix and runs until SIGTERM.
type NotificationService struct {
	*consumer.BaseConsumer
}

func NewNotificationService(amqpURL string) (*NotificationService, error) {
	base, err := consumer.New(consumer.Config{
		URL:         amqpURL,
		Name:        "notifications",
		Exchange:    "plane.event_stream",
		MaxAttempts: 4,
	})
	if err != nil {
		return nil, err
	}
	s := &NotificationService{BaseConsumer: base}
	s.HandleFunc("workitem.comment.", s.commented)
	s.HandleFunc("workitem.", s.changed)
	return s, nil
}

func (s *NotificationService) commented(ctx context.Context, m *warren.Message) error {
	var comment struct {
		Body string `json:"comment_stripped"`
	}
	if err := m.Event.Payload.DecodeData(&comment); err != nil {
		return warren.Permanent(err) // a payload we cannot read will not get better
	}
	return nil
}

func (s *NotificationService) changed(ctx context.Context, m *warren.Message) error {
	if m.Event.IsSystemInitiated() {
		return warren.Skip("changed by " + m.Event.InitiatorType)
	}
	return errors.New("mail server unavailable") // transient: retried through the tiers
}

func ExampleBaseConsumer() {
	svc, err := NewNotificationService("amqp://guest:guest@127.0.0.1:5672/")
	if err != nil {
		log.Fatal(err)
	}
	go http.ListenAndServe("127.0.0.1:8081", svc.HealthHandler()) // /healthz, /readyz
	if err := svc.RunUntilSignal(context.Background()); err != nil {
		log.Fatal(err)
	}
}

func ExampleConfig() {
	_, err := consumer.New(consumer.Config{
		Name:        "webhook",
		Exchange:    "plane.event_stream",
		QueueType:   consumer.Quorum,
		MessageTTL:  30 * time.Minute,
		RetryDelays: []time.Duration{5 * time.Second, time.Minute, 15 * time.Minute},
		MaxAttempts: 6,
		Unhandled:   consumer.DeadLetterUnhandled,
	})
	if err != nil {
		log.Fatal(err)
	}
}

// A consumer that must stay within 512 MiB of message bodies: with the
// broker's max_message_size at 4 MiB (rabbitmq.conf: max_message_size =
// 4194304), 4 channels and 16 workers, the prefetch is lowered to 31 per
// channel (4 × 31 × 4 MiB + 16 × 1 MiB ≤ 512 MiB) and the log says so.
// A budget too small for one message per channel stops Run.
func ExampleConfig_memoryBudget() {
	c, err := consumer.New(consumer.Config{
		Name:         "webhook",
		MemoryBudget: 512 << 20,
		// Known to the operator; without it each session probes the broker.
		BrokerMaxMessageSize: 4 << 20,
	})
	if err != nil {
		log.Fatal(err)
	}
	c.HandleFunc("", func(context.Context, *warren.Message) error { return nil })
	if err := c.RunUntilSignal(context.Background()); errors.Is(err, consumer.ErrOverMemoryBudget) {
		log.Fatalf("raise the budget or lower the broker's max_message_size: %v", err)
	}
}

// A consumer taking over a queue Plane's BaseConsumer declared (1-hour
// TTL, dead-lettering to the fanout exchange plane.event_stream.dlq that
// all of Plane's consumers share) without deleting it or what it holds.
// The queue keeps its arguments; the consumer adds its DLQ, retry tiers and
// binding, and logs what it found and added. DeadLetterExchange is left at
// its default: the DLQ is not bound to the shared exchange, where the
// other Plane consumers' expired messages would reach it too.
func ExampleConfig_adoptQueue() {
	c, err := consumer.New(consumer.Config{
		Name:       "plane.event_stream.webhook",
		Exchange:   "plane.event_stream",
		AdoptQueue: true,
	})
	if err != nil {
		log.Fatal(err)
	}
	topo := c.Topology()
	fmt.Println(topo.Queue, topo.DLQ, topo.Retry[0].Queue)
	// Output: plane.event_stream.webhook plane.event_stream.webhook.dlq plane.event_stream.webhook.retry.1s
}

// Ordered scale-out: the events of one entity are handled in the order
// they were published, one at a time, while several replicas share the
// work. Each replica runs this same code; the broker makes one replica
// active per partition, and replicas hand partitions on until none holds
// more than ceil(8/replicas). The producer must set the entity header
// (warren's relay does: warren.HeaderEntityID). A failing event holds its
// partition while it is retried in place, then goes to the DLQ.
func ExampleConfig_partitions() {
	c, err := consumer.New(consumer.Config{
		Name:        "billing",
		Exchange:    "plane.event_stream",
		Partitions:  8,
		QueueType:   consumer.Quorum,
		RetryDelays: []time.Duration{time.Second, 5 * time.Second},
		MaxAttempts: 4,
	})
	if err != nil {
		log.Fatal(err)
	}
	topo := c.Topology()
	fmt.Println(topo.PartitionExchange, topo.PartitionQueues[0], topo.PartitionQueues[7], topo.DLQ)
	c.HandleFunc("workitem.", func(ctx context.Context, m *warren.Message) error {
		return nil // events of m.Event.EntityID arrive here in order
	})
	// go c.RunUntilSignal(context.Background()); c.Health().ActivePartitions
	// lists the partitions this replica is active on.
	// Output: billing.partitions billing.p0 billing.p7 billing.dlq
}
