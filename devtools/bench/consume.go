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
		about: fmt.Sprintf("Drain a backlog of Plane-shaped events with a no-op handler, prefetch %d, %d workers. "+
			"Raw variants use amqp091-go directly; warren is a BaseConsumer with its defaults. "+
			"Watermill is a watermill-amqp durable-queue subscriber on the backlog queue under a router, prefetch %d per handler; "+
			"each router handler is a channel that handles and acks one message at a time, so its concurrency is its number of handlers.", prefetch, workers, prefetch),
		metrics: []metric{{name: throughput.name, target: target{ratio: 1, peerRatio: 1.4}}},
		variants: []variant{
			{name: "raw: 1 channel, ack each (naive)", baseline: true, run: rawConsume(1, 1, nil)},
			{name: "raw: 1 channel, ack multiple every 100", baseline: true, run: rawConsume(1, 100, nil)},
			{name: "raw: 16 channels, ack each", baseline: true, run: rawConsume(16, 1, nil)},
			{name: "raw: 16 channels, ack multiple every 100", baseline: true, run: rawConsume(16, 100, nil)},
			{name: "watermill: router, 1 handler", peer: true, run: watermillConsume(1, false)},
			{name: "watermill: router, 16 handlers", peer: true, run: watermillConsume(workers, false)},
			{name: "reference: raw, 16 channels, ack multiple every 100, on a queue with warren's default arguments", reference: true,
				run: rawConsumeOn(warrenQueueArgs, 16, 100, nil)},
			{name: "warren: BaseConsumer defaults", run: warrenConsume(nil),
				why: "the consumer checks that each body is one JSON value (encoding/json.Valid) and decodes and validates the envelope, " +
					"about 2.5 µs a message in a CPU profile of this drain (json.Valid half of it), where the raw loops read nothing, " +
					"and on two cores that the broker mostly fills that comes out of the rate. Its queue's arguments are not the cause: " +
					"the reference row, the best raw loop on a queue declared as warren declares its own (a message TTL of an hour, " +
					"a dead-letter exchange), ran at 0.95 to 1.01 of the plain queue's in three runs on 2026-12-07, within the spread of either."},
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
	if _, err := ch.QueueDeclare(queue, true, false, false, false, e.queueArgs(args)); err != nil {
		return nil, err
	}
	ch.Close()
	if err := fill(ctx, e, conn, "", queue, e.messages); err != nil {
		return nil, err
	}
	return &backlog{conn: conn, queue: queue}, nil
}

// fill publishes n of e's events with confirms, many in flight.
func fill(ctx context.Context, e *env, conn *amqp.Connection, exchange, key string, n int) error {
	pub, err := amqpx.NewPublisher(ctx, conn, 1024)
	if err != nil {
		return err
	}
	defer pub.Close()
	var wg sync.WaitGroup
	var firstErr atomic.Value
	sem := make(chan struct{}, 1024)
	for i := range n {
		msg, err := amqpx.EventPublishing(e.event(i))
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

// sampleEvent is a Plane workitem.updated event. With its four UUIDs its
// JSON is 453 bytes (the report states the size it measures), about what
// the Plane envelope weighs with a small payload.
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

// perMessage is what a raw variant does with each delivery before it acks
// it: nothing, or the raw client call its scenario measures.
type perMessage func(ctx context.Context, d *amqp.Delivery) error

// rawSetup readies one measurement of a raw variant (a Redis prefix, a
// table of its own) and returns its per-message work and the cleanup that
// removes what it made.
type rawSetup func(ctx context.Context, e *env) (work perMessage, cleanup func(), err error)

// rawConsume drains the backlog with amqp091-go: channels channels, each
// with its own consumer goroutine pool, acking every ackEvery messages with
// multiple set (ackEvery 1 acks each message). With setup, each message's
// work is done before its ack.
func rawConsume(channels, ackEvery int, setup rawSetup) func(ctx context.Context, e *env) (figures, error) {
	return rawConsumeOn(nil, channels, ackEvery, setup)
}

// warrenQueueArgs are the arguments a BaseConsumer at its defaults
// declares its queue with (consumer.DefaultMessageTTL and a dead-letter
// exchange), so a raw loop can drain a queue the broker treats alike.
var warrenQueueArgs = amqp.Table{
	"x-message-ttl":          consumer.DefaultMessageTTL.Milliseconds(),
	"x-dead-letter-exchange": "amq.fanout",
}

// rawConsumeOn is rawConsume on a backlog queue declared with queueArgs.
func rawConsumeOn(queueArgs amqp.Table, channels, ackEvery int, setup rawSetup) func(ctx context.Context, e *env) (figures, error) {
	return func(ctx context.Context, e *env) (figures, error) {
		elapsed, err := rawDrain(ctx, e, queueArgs, channels, ackEvery, setup, nil)
		if err != nil {
			return nil, err
		}
		return rate(e.messages, elapsed), nil
	}
}

// rawDrain is one measurement of rawConsume: it fills a queue of its own
// (declared with queueArgs) with e.messages events, calls filled (when set: BenchmarkConsume starts
// its timer there), then dials and drains the queue, and returns the time
// from the first consume to the ack of the last message.
func rawDrain(ctx context.Context, e *env, queueArgs amqp.Table, channels, ackEvery int, setup rawSetup, filled func()) (time.Duration, error) {
	var work perMessage
	if setup != nil {
		w, cleanup, err := setup(ctx, e)
		if err != nil {
			return 0, err
		}
		defer cleanup()
		work = w
	}
	b, err := newBacklog(ctx, e, uniqueName("raw"), queueArgs)
	if err != nil {
		return 0, err
	}
	defer b.close()
	if filled != nil {
		filled()
	}
	conn, err := amqpx.Dial(ctx, e.amqpURL, amqpx.DialOptions{Name: "bench raw consumer"})
	if err != nil {
		return 0, err
	}
	defer conn.Close()

	var handled atomic.Int64
	done := make(chan struct{})
	failed := make(chan error, 1)
	var once sync.Once
	finish := func() {
		if handled.Add(1) == int64(e.messages) {
			once.Do(func() { close(done) })
		}
	}
	handle := func(d *amqp.Delivery) {
		if work == nil {
			return
		}
		if err := work(ctx, d); err != nil {
			select {
			case failed <- err:
			default:
			}
		}
	}
	begin := time.Now()
	if err := consumeRaw(conn, b.queue, channels, ackEvery, handle, finish); err != nil {
		return 0, err
	}
	select {
	case <-done:
	case err := <-failed:
		return 0, err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	return time.Since(begin), nil
}

// consumeRaw starts consuming queue on channels channels of conn, each
// with prefetch deliveries in flight, and returns once the broker has
// registered every consumer. Each delivery is passed to handle and then
// acked, by itself (ackEvery 1, with workers goroutines sharing the
// channels) or with multiple set every ackEvery deliveries; acked is
// called once per delivery after the ack that covers it.
func consumeRaw(conn *amqp.Connection, queue string, channels, ackEvery int, handle func(*amqp.Delivery), acked func()) error {
	for range channels {
		ch, err := conn.Channel()
		if err != nil {
			return err
		}
		if err := ch.Qos(prefetch, 0, false); err != nil {
			return err
		}
		deliveries, err := ch.Consume(queue, "", false, false, false, false, nil)
		if err != nil {
			return err
		}
		if ackEvery == 1 {
			// Naive: workers share the channel and ack each message.
			for range max(workers/channels, 1) {
				go func() {
					for d := range deliveries {
						handle(&d)
						d.Ack(false)
						acked()
					}
				}()
			}
			continue
		}
		// Batched: one goroutine per channel acks in order, multiple,
		// every ackEvery messages, and whatever it holds once its
		// channel has nothing more for it (the end of the backlog,
		// which a channel cannot tell from a pause between deliveries).
		go func() {
			n := 0
			var last amqp.Delivery
			idle := time.NewTimer(time.Hour)
			defer idle.Stop()
			ack := func() {
				last.Ack(true)
				for range n {
					acked()
				}
				n = 0
			}
			for {
				select {
				case d, ok := <-deliveries:
					if !ok {
						return
					}
					handle(&d)
					last = d
					n++
					if n%ackEvery == 0 {
						ack()
					} else {
						idle.Reset(time.Millisecond)
					}
				case <-idle.C:
					if n > 0 {
						ack()
					}
				}
			}
		}()
	}
	return nil
}

// warrenSetup readies one measurement of a warren variant: it makes what
// the variant needs (a store, a table) and installs the middleware it
// measures on c. cleanup removes what it made.
type warrenSetup func(ctx context.Context, e *env, c *consumer.BaseConsumer) (cleanup func(), err error)

// warrenConsume drains the backlog with a BaseConsumer at its defaults, as
// tweak changes them, and no middleware.
func warrenConsume(tweak func(*consumer.Config)) func(ctx context.Context, e *env) (figures, error) {
	return warrenConsumeWith(tweak, nil)
}

// warrenConsumeWith drains the backlog with a BaseConsumer whose handler
// does nothing, behind what setup installs.
func warrenConsumeWith(tweak func(*consumer.Config), setup warrenSetup) func(ctx context.Context, e *env) (figures, error) {
	return func(ctx context.Context, e *env) (figures, error) {
		elapsed, err := warrenDrain(ctx, e, tweak, setup, nil)
		if err != nil {
			return nil, err
		}
		return rate(e.messages, elapsed), nil
	}
}

// warrenDrain is one measurement of warrenConsumeWith: it fills the
// consumer's queue with e.messages events before the consumer starts, so
// that warren drains the same backlog the raw variants do, calls filled
// (when set: BenchmarkConsume starts its timer there), then runs the
// consumer until it has handled them all.
func warrenDrain(ctx context.Context, e *env, tweak func(*consumer.Config), setup warrenSetup, filled func()) (time.Duration, error) {
	backlog := func(ctx context.Context, conn *amqp.Connection, queue string) error {
		if err := fill(ctx, e, conn, "", queue, e.messages); err != nil {
			return err
		}
		if filled != nil {
			filled()
		}
		return nil
	}
	return runWarrenConsumer(ctx, e, tweak, setup, warrenLoad{n: e.messages, before: backlog})
}

// warrenLoad is what a measurement's BaseConsumer handles: n messages
// that before publishes to its queue ahead of the consumer's start (a
// backlog), or that during publishes once the consumer is ready.
type warrenLoad struct {
	n              int
	before, during func(ctx context.Context, conn *amqp.Connection, queue string) error
	handled        func(m *warren.Message) // called by the handler, which does nothing else
	// replicas is how many BaseConsumers of the same Config share the
	// queue, as replicas of one service would (0 means 1).
	replicas int
}

// runWarrenConsumer runs a BaseConsumer at its defaults, as tweak changes
// them, behind what setup installs, on a topology of its own, until it has
// handled load's n messages, and returns the time from its start to the
// last of them. With load.replicas, that many run on the queue at once,
// each with what setup installs, and the time is to the last message any
// of them handles.
func runWarrenConsumer(ctx context.Context, e *env, tweak func(*consumer.Config), setup warrenSetup, load warrenLoad) (time.Duration, error) {
	name := uniqueName("warren")
	exchange := name + ".ex"
	cfg := consumer.Config{URL: e.amqpURL, Name: name, Exchange: exchange, Logger: discardLogger}
	if e.quorum {
		cfg.QueueType = consumer.Quorum
	}
	if tweak != nil {
		tweak(&cfg)
	}
	cs := make([]*consumer.BaseConsumer, max(load.replicas, 1))
	for i := range cs {
		c, err := consumer.New(cfg)
		if err != nil {
			return 0, err
		}
		if setup != nil {
			cleanup, err := setup(ctx, e, c)
			if err != nil {
				return 0, err
			}
			defer cleanup()
		}
		cs[i] = c
	}
	if err := declareOnly(ctx, cfg); err != nil {
		return 0, err
	}
	conn, err := amqpx.Dial(ctx, e.amqpURL, amqpx.DialOptions{Name: "bench fill"})
	if err != nil {
		return 0, err
	}
	defer func() {
		if ch, err := conn.Channel(); err == nil {
			for _, q := range cs[0].Topology().Queues() {
				ch.QueueDelete(q, false, false, false)
			}
			ch.ExchangeDelete(exchange, false, false)
			ch.ExchangeDelete(cs[0].Topology().DLX, false, false)
		}
		conn.Close()
	}()
	if load.before != nil {
		if err := load.before(ctx, conn, name); err != nil {
			return 0, err
		}
	}

	var handled atomic.Int64
	done := make(chan struct{})
	for _, c := range cs {
		c.HandleFunc("", func(_ context.Context, m *warren.Message) error {
			if load.handled != nil {
				load.handled(m)
			}
			if handled.Add(1) == int64(load.n) {
				close(done)
			}
			return nil
		})
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, len(cs))
	begin := time.Now()
	for _, c := range cs {
		go func() { errc <- c.Run(runCtx) }()
	}
	fed := make(chan error, 1)
	if load.during != nil {
		go func() {
			for _, c := range cs {
				if err := waitReady(runCtx, c, errc); err != nil {
					fed <- err
					return
				}
			}
			fed <- load.during(runCtx, conn, name)
		}()
	}
wait:
	for {
		select {
		case <-done:
			break wait
		case err := <-fed:
			if err != nil {
				return 0, err
			}
		case err := <-errc:
			return 0, fmt.Errorf("consumer stopped: %w", err)
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	elapsed := time.Since(begin)
	cancel()
	for range cs {
		if err := <-errc; err != nil {
			return 0, err
		}
	}
	var settled uint64
	for _, c := range cs {
		settled += c.Stats().Done
	}
	if settled != uint64(load.n) {
		// A deferred or retried message was handled again later, or
		// not at all: the measurement is not of the work it claims.
		return 0, fmt.Errorf("%d consumers settled %d messages as done, want %d (stats of the first %+v)", len(cs), settled, load.n, cs[0].Stats())
	}
	return elapsed, nil
}

var discardLogger = slog.New(slog.NewTextHandler(io.Discard, nil))

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
	if err := waitReady(ctx, c, errc); err != nil {
		cancel()
		return err
	}
	cancel()
	return <-errc
}

// waitReady waits until c, whose Run reports to errc, is consuming. The
// consumer has no readiness signal but its health; a look every 5ms is
// what that costs.
func waitReady(ctx context.Context, c *consumer.BaseConsumer, errc <-chan error) error {
	for !c.Health().Ready {
		select {
		case err := <-errc:
			return fmt.Errorf("consumer stopped before it was ready: %v", err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}
