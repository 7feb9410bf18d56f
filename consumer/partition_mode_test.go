package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/consumer"
	"github.com/warrenmq/warren/internal/testenv"
)

// runRefused runs c and wants a TopologyError naming kind name at once.
func runRefused(t *testing.T, c *consumer.BaseConsumer, kind, name, says string) {
	t.Helper()
	c.HandleFunc("", func(ctx context.Context, m *warren.Message) error { return nil })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := c.Run(ctx)
	var te *consumer.TopologyError
	if !errors.As(err, &te) {
		t.Fatalf("Run returned %v, want a TopologyError", err)
	}
	t.Logf("%v", err)
	if te.Kind != kind || te.Name != name {
		t.Errorf("the error names %s %s, want %s %s", te.Kind, te.Name, kind, name)
	}
	if !strings.Contains(err.Error(), says) {
		t.Errorf("the error does not say %q", says)
	}
}

// Partitions turned off (4 → 0): the partition exchange, still bound to
// the events exchange, would fill the partition queues with events nobody
// consumes. The plain consumer refuses to start and says what to delete.
func TestPartitionsTurnedOffRefused(t *testing.T) {
	t.Parallel()
	c := newConsumer(t, func(cfg *consumer.Config) { cfg.Partitions = 4 })
	c.HandleFunc("", func(ctx context.Context, m *warren.Message) error { return nil })
	if err := start(t, c)(); err != nil {
		t.Fatal(err)
	}
	cfg := c.Config()
	plain := newConsumer(t, func(c2 *consumer.Config) { *c2 = cfg; c2.Partitions = 0 })
	runRefused(t, plain, "exchange", consumer.PartitionExchangeName(cfg.Name), "delete the exchange "+consumer.PartitionExchangeName(cfg.Name))
}

// Partitions turned on (0 → 2): the plain queue, if still bound to the
// events exchange, would fill up with events nobody consumes. The
// partitioned consumer refuses to start and says what to delete.
func TestPartitionsTurnedOnRefused(t *testing.T) {
	t.Parallel()
	c := newConsumer(t, nil)
	c.HandleFunc("", func(ctx context.Context, m *warren.Message) error { return nil })
	if err := start(t, c)(); err != nil {
		t.Fatal(err)
	}
	cfg := c.Config()
	parted := newConsumer(t, func(c2 *consumer.Config) { *c2 = cfg; c2.Partitions = 2 })
	runRefused(t, parted, "queue", cfg.Name, "delete it")
}

// A partition handles one delivery at a time, so its channel's prefetch is
// capped at MaxPartitionPrefetch, whatever Prefetch says: the rest stays
// in the queue, where a hand-over does not have to return it.
func TestPartitionPrefetchCapped(t *testing.T) {
	t.Parallel()
	c := newConsumer(t, func(cfg *consumer.Config) { cfg.Partitions, cfg.Prefetch = 1, 256 })
	started := make(chan struct{}, 1)
	release := make(chan struct{})
	c.HandleFunc("", func(ctx context.Context, m *warren.Message) error {
		select {
		case started <- struct{}{}:
		default:
		}
		<-release
		return nil
	})
	if got := c.Config().Prefetch; got != consumer.MaxPartitionPrefetch {
		t.Errorf("Config().Prefetch = %d, want %d", got, consumer.MaxPartitionPrefetch)
	}
	start(t, c)
	defer close(release)
	const n = 40
	evs := make([]warren.Event, n)
	for i := range evs {
		evs[i] = seqEvent("prefetch", i)
	}
	publishInOrder(t, c.Topology().Exchange, publishingsOf(t, evs...))
	<-started
	queue, ch := c.Topology().PartitionQueues[0], testenv.Channel(t)
	testenv.WaitFor(t, 20*time.Second, fmt.Sprintf("%d events left in %s", n-consumer.MaxPartitionPrefetch, queue), func() bool {
		return testenv.QueueDepth(t, ch, queue) == n-consumer.MaxPartitionPrefetch
	})
}
