package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/consumer"
	"github.com/warrenmq/warren/internal/amqpx"
)

const (
	prefetch = 256
	workers  = 16
)

func consumeScenario() scenario {
	return scenario{
		name: "consume",
		about: fmt.Sprintf("Drain a backlog of ~300-byte Plane-shaped events with a no-op handler, prefetch %d, %d workers. "+
			"Raw variants use amqp091-go directly; warren is a BaseConsumer with its defaults.", prefetch, workers),
		variants: []variant{
			{name: "raw: 1 channel, ack each (naive)", baseline: true, run: rawConsume(1, 1)},
			{name: "raw: 1 channel, ack multiple every 100", baseline: true, run: rawConsume(1, 100)},
			{name: "raw: 16 channels, ack each", baseline: true, run: rawConsume(16, 1)},
			{name: "warren: BaseConsumer defaults", run: warrenConsume(nil)},
			{name: "warren: 1 channel", run: warrenConsume(func(c *consumer.Config) { c.Channels = 1 })},
			{name: "warren: 2 channels", run: warrenConsume(func(c *consumer.Config) { c.Channels = 2 })},
			{name: "warren: 8 channels", run: warrenConsume(func(c *consumer.Config) { c.Channels = 8 })},
		},
	}
}

// backlog is a queue filled with env.messages events, ready to drain.
type backlog struct {
	conn  *amqp.Connection
	queue string
}

func newBacklog(ctx context.Context, e *env, queue string, args amqp.Table) (*backlog, error) {
	conn, err := amqpx.Dial(ctx, e.amqpURL, amqpx.DialOptions{Name: "bench fill"})
	if err != nil {
		return nil, err
	}
	ch, err := conn.Channel()
	if err != nil {
		return nil, err
	}
	if _, err := ch.QueueDeclare(queue, true, false, false, false, args); err != nil {
		return nil, err
	}
	ch.Close()
	if err := fill(ctx, conn, "", queue, e.messages); err != nil {
		return nil, err
	}
	return &backlog{conn: conn, queue: queue}, nil
}

// fill publishes n events with confirms, many in flight.
func fill(ctx context.Context, conn *amqp.Connection, exchange, key string, n int) error {
	pub, err := amqpx.NewPublisher(conn, 1024)
	if err != nil {
		return err
	}
	defer pub.Close()
	var wg sync.WaitGroup
	var firstErr atomic.Value
	sem := make(chan struct{}, 1024)
	for i := range n {
		msg, err := amqpx.EventPublishing(sampleEvent(i))
		if err != nil {
			return err
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := pub.Publish(ctx, exchange, key, msg); err != nil {
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

func (b *backlog) close() {
	if ch, err := b.conn.Channel(); err == nil {
		ch.QueueDelete(b.queue, false, false, false)
	}
	b.conn.Close()
}

// sampleEvent is a Plane workitem.updated event of about 300 bytes.
func sampleEvent(i int) warren.Event {
	return warren.Event{
		ID: fmt.Sprintf("6f1c2a9e-0000-4000-8000-%012d", i), Type: "workitem.updated", EntityType: "issue",
		EntityID: "2b8d5f3e-7c41-4a0b-9e6d-1f2a3b4c5d6e", WorkspaceID: "9a8b7c6d-5e4f-4321-8765-0fedcba98765",
		ProjectID: "1a2b3c4d-5e6f-4a1b-8c2d-3e4f5a6b7c8d", InitiatorID: "u-42", InitiatorType: "USER",
		Payload:   warren.Payload{Data: []byte(`{"state":"done","priority":"high"}`), PreviousAttributes: []byte(`{"state":"todo"}`)},
		CreatedAt: time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC), Version: "1.0",
	}
}

func uniqueName(kind string) string {
	var b [4]byte
	rand.Read(b[:])
	return "bench_" + kind + "_" + hex.EncodeToString(b[:])
}

// rawConsume drains the backlog with amqp091-go: channels channels, each
// with its own consumer goroutine pool, acking every ackEvery messages with
// multiple set (ackEvery 1 acks each message).
func rawConsume(channels, ackEvery int) func(ctx context.Context, e *env) (float64, error) {
	return func(ctx context.Context, e *env) (float64, error) {
		b, err := newBacklog(ctx, e, uniqueName("raw"), nil)
		if err != nil {
			return 0, err
		}
		defer b.close()
		conn, err := amqpx.Dial(ctx, e.amqpURL, amqpx.DialOptions{Name: "bench raw consumer"})
		if err != nil {
			return 0, err
		}
		defer conn.Close()

		var handled atomic.Int64
		done := make(chan struct{})
		var once sync.Once
		finish := func() {
			if handled.Add(1) == int64(e.messages) {
				once.Do(func() { close(done) })
			}
		}
		begin := time.Now()
		for range channels {
			ch, err := conn.Channel()
			if err != nil {
				return 0, err
			}
			if err := ch.Qos(prefetch, 0, false); err != nil {
				return 0, err
			}
			deliveries, err := ch.Consume(b.queue, "", false, false, false, false, nil)
			if err != nil {
				return 0, err
			}
			if ackEvery == 1 {
				// Naive: workers share the channel and ack each message.
				for range max(workers/channels, 1) {
					go func() {
						for d := range deliveries {
							d.Ack(false)
							finish()
						}
					}()
				}
				continue
			}
			// Batched: one goroutine per channel acks in order, multiple,
			// every ackEvery messages (and at the end of the backlog).
			go func() {
				n := 0
				for d := range deliveries {
					n++
					if n%ackEvery == 0 || handled.Load()+int64(ackEvery) >= int64(e.messages) {
						d.Ack(true)
						for range n {
							finish()
						}
						n = 0
					}
				}
			}()
		}
		select {
		case <-done:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
		return float64(e.messages) / time.Since(begin).Seconds(), nil
	}
}

// warrenConsume drains the backlog with a BaseConsumer at its defaults.
func warrenConsume(tweak func(*consumer.Config)) func(ctx context.Context, e *env) (float64, error) {
	return func(ctx context.Context, e *env) (float64, error) {
		name := uniqueName("warren")
		exchange := name + ".ex"
		cfg := consumer.Config{URL: e.amqpURL, Name: name, Exchange: exchange, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
		if tweak != nil {
			tweak(&cfg)
		}
		c, err := consumer.New(cfg)
		if err != nil {
			return 0, err
		}
		// Declare the topology and fill the queue before consuming, so warren
		// drains the same backlog the raw variants do.
		if err := declareOnly(ctx, cfg); err != nil {
			return 0, err
		}
		conn, err := amqpx.Dial(ctx, e.amqpURL, amqpx.DialOptions{Name: "bench fill"})
		if err != nil {
			return 0, err
		}
		defer func() {
			if ch, err := conn.Channel(); err == nil {
				for _, q := range c.Topology().Queues() {
					ch.QueueDelete(q, false, false, false)
				}
				ch.ExchangeDelete(exchange, false, false)
				ch.ExchangeDelete(c.Topology().DLX, false, false)
			}
			conn.Close()
		}()
		if err := fill(ctx, conn, "", name, e.messages); err != nil {
			return 0, err
		}

		var handled atomic.Int64
		done := make(chan struct{})
		c.HandleFunc("", func(context.Context, *warren.Message) error {
			if handled.Add(1) == int64(e.messages) {
				close(done)
			}
			return nil
		})
		runCtx, cancel := context.WithCancel(ctx)
		errc := make(chan error, 1)
		begin := time.Now()
		go func() { errc <- c.Run(runCtx) }()
		select {
		case <-done:
		case err := <-errc:
			cancel()
			return 0, fmt.Errorf("consumer stopped: %w", err)
		case <-ctx.Done():
		}
		elapsed := time.Since(begin)
		cancel()
		if err := <-errc; err != nil {
			return 0, err
		}
		return float64(e.messages) / elapsed.Seconds(), nil
	}
}

// declareOnly declares a consumer's topology by running it until it is
// ready, with no handler traffic (the queue is empty).
func declareOnly(ctx context.Context, cfg consumer.Config) error {
	c, err := consumer.New(cfg)
	if err != nil {
		return err
	}
	runCtx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- c.Run(runCtx) }()
	for !c.Health().Ready {
		select {
		case err := <-errc:
			cancel()
			return err
		case <-time.After(5 * time.Millisecond):
		}
	}
	cancel()
	return <-errc
}
