package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/consumer"
	"github.com/warrenmq/warren/internal/amqpx"
)

// The workers dimension's latency workload: a steady stream, not a
// backlog, since in a backlog a message's latency is how long it queued
// behind the others.
const (
	pacedRate     = 2000 // events per second
	pacedMessages = 4000 // 2 seconds: with the warm-up left out, p99 is the 30th slowest
	// pacedWarmUp is how many of the first events are left out: the
	// consumer's first deliveries, while it settles into the load.
	pacedWarmUp = 1000
)

// pacedClock holds when each event of a paced run was published and
// when its handler started.
type pacedClock struct {
	sent, arrived [pacedMessages]atomic.Int64 // Unix nanoseconds
	handled       atomic.Int64
	done          chan struct{} // closed when every event has arrived
}

func newPacedClock() *pacedClock { return &pacedClock{done: make(chan struct{})} }

// publish publishes the run's events to queue, event i due pacedRate-th
// of a second after event i-1, each waiting for its confirm on a goroutine
// of its own so that a slow confirm does not hold back the schedule.
func (p *pacedClock) publish(ctx context.Context, e *env, conn *amqp.Connection, queue string) error {
	pub, err := amqpx.NewPublisher(ctx, conn, pacedMessages)
	if err != nil {
		return err
	}
	defer pub.Close()
	var wg sync.WaitGroup
	var firstErr atomic.Value
	start := time.Now()
	for i := range pacedMessages {
		msg, err := amqpx.EventPublishing(e.event(i))
		if err != nil {
			return err
		}
		time.Sleep(time.Until(start.Add(time.Duration(i) * time.Second / pacedRate)))
		wg.Go(func() {
			p.sent[i].Store(time.Now().UnixNano())
			if err := pub.Publish(ctx, "", queue, msg); err != nil {
				firstErr.CompareAndSwap(nil, err)
			}
		})
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return err
	}
	return nil
}

// arrive notes that the handler started on the event with this id.
func (p *pacedClock) arrive(id string) {
	now := time.Now().UnixNano()
	if i, ok := eventIndex(amqp.Delivery{MessageId: id}); ok && i < pacedMessages && p.arrived[i].CompareAndSwap(0, now) {
		if p.handled.Add(1) == pacedMessages {
			close(p.done)
		}
	}
}

// p99 is the 99th percentile of the publish → handler latency in
// milliseconds, leaving out the warm-up.
func (p *pacedClock) p99() figures {
	ms := make([]float64, 0, pacedMessages-pacedWarmUp)
	for i := pacedWarmUp; i < pacedMessages; i++ {
		ms = append(ms, float64(p.arrived[i].Load()-p.sent[i].Load())/float64(time.Millisecond))
	}
	slices.Sort(ms)
	return figures{percentile(ms, 0.99)}
}

// rawPaced measures the paced latency of the raw ack-multiple consumer
// with this many channels.
func rawPaced(channels int) runFunc {
	return func(ctx context.Context, e *env) (figures, error) {
		empty := *e
		empty.messages = 0
		b, err := newBacklog(ctx, &empty, uniqueName("raw"), nil)
		if err != nil {
			return nil, err
		}
		defer b.close()
		conn, err := amqpx.Dial(ctx, e.amqpURL, amqpx.DialOptions{Name: "bench raw consumer"})
		if err != nil {
			return nil, err
		}
		defer conn.Close()
		p := newPacedClock()
		handle := func(d *amqp.Delivery) { p.arrive(d.MessageId) }
		if err := consumeRaw(conn, b.queue, channels, 100, handle, func() {}); err != nil {
			return nil, err
		}
		if err := p.publish(ctx, e, b.conn, b.queue); err != nil {
			return nil, err
		}
		select {
		case <-p.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(30 * time.Second):
			return nil, fmt.Errorf("%d of %d paced events arrived within 30s of the last publish", p.handled.Load(), pacedMessages)
		}
		return p.p99(), nil
	}
}

// warrenPaced measures the paced latency of a BaseConsumer at its
// defaults, as tweak changes them.
func warrenPaced(tweak func(*consumer.Config)) runFunc {
	return func(ctx context.Context, e *env) (figures, error) {
		p := newPacedClock()
		publish := func(ctx context.Context, conn *amqp.Connection, queue string) error {
			return p.publish(ctx, e, conn, queue)
		}
		_, err := runWarrenConsumer(ctx, e, tweak, nil, warrenLoad{n: pacedMessages, during: publish,
			handled: func(m *warren.Message) { p.arrive(m.Event.ID) }})
		if err != nil {
			return nil, err
		}
		return p.p99(), nil
	}
}
