package dlqtool_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/consumer"
	"github.com/warrenmq/warren/dlq"
	"github.com/warrenmq/warren/dlqtool"
	"github.com/warrenmq/warren/internal/testenv"
)

// A dead letter whose attempts are spent, imported into its consumer's
// queue (`import --to`), comes back with a fresh set of attempts, as a
// replay gives it: a real consumer that fails it once transiently retries
// it. (The consumer trusts the history of a delivery from the default
// exchange, so when the import kept the file's x-warren-attempts, the one
// failure dead-lettered it again as exhausted.)
func TestImportIntoConsumerQueueGivesFreshAttempts(t *testing.T) {
	t.Parallel()
	cfg := consumer.Config{
		URL: testenv.AMQPURL(t), Name: testenv.Name(t, "c"), Exchange: testenv.Name(t, "ex"),
		MaxAttempts: 3, RetryDelays: []time.Duration{20 * time.Millisecond},
		Logger: slog.New(slog.NewTextHandler(t.Output(), nil)),
	}
	c, err := consumer.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	topo := c.Topology()
	testenv.CleanupQueues(t, topo.Queues()...)
	testenv.CleanupExchanges(t, topo.Exchange, topo.DLX)

	var mu sync.Mutex
	var attempts []int
	handled := make(chan struct{})
	c.HandleFunc("workitem.", func(ctx context.Context, m *warren.Message) error {
		mu.Lock()
		defer mu.Unlock()
		attempts = append(attempts, m.Attempt)
		if len(attempts) == 1 {
			return errors.New("transient: first try fails")
		}
		close(handled)
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- c.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-ran })
	testenv.WaitFor(t, 60*time.Second, "the consumer ready", func() bool { return c.Health().Ready })

	conn := testenv.AMQPConn(t)
	q, err := dlqtool.Open(ctx, conn, cfg.Name)
	if err != nil {
		t.Fatal(err)
	}
	top := testenv.DeadLetterTopology{Consumer: topo.Queue, Exchange: topo.Exchange, DLX: topo.DLX, DLQ: topo.DLQ}
	spent := top.Message(testenv.Dead{ID: "spent", Type: "workitem.updated", Class: dlq.ClassExhausted, Err: "timeout", Attempts: cfg.MaxAttempts})
	msgs := []dlqtool.Message{messageOf(0, spent)}
	if _, err := q.Import(ctx, msgs, dlqtool.ImportOptions{To: topo.Queue}); err != nil {
		t.Fatal(err)
	}

	dead := make(chan amqp.Delivery, 1)
	ch := testenv.Channel(t)
	go func() {
		for ctx.Err() == nil {
			if d, ok, err := ch.Get(topo.DLQ, true); err != nil || ok {
				if ok {
					dead <- d
				}
				return
			}
			select {
			case <-ctx.Done():
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	select {
	case <-handled:
	case d := <-dead:
		t.Fatalf("the imported message was dead-lettered again (%s after attempt %v), not retried", d.Headers[dlq.HeaderErrorClass], d.Headers[dlq.HeaderAttempts])
	case <-time.After(60 * time.Second):
		t.Fatal("the imported message was neither retried nor dead-lettered within 60s")
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(attempts, []int{1, 2}) {
		t.Errorf("the handler saw attempts %v, want [1 2]", attempts)
	}
}
