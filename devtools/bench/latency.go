package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/internal/amqpx"
	"github.com/warrenmq/warren/relay"
)

const (
	// pollerInterval is how often the baseline poller looks at the outbox:
	// Plane's outbox poller runs every 250 ms.
	pollerInterval = 250 * time.Millisecond
	// latencyWarmUp is the start of each measurement whose events are not
	// counted: both sides are connecting and settling into the load.
	latencyWarmUp = time.Second
	// producers commit the events concurrently, so that one slow commit
	// does not hold back the schedule.
	producers = 8
)

func latencyScenario() scenario {
	return scenario{
		name: "commit → publish latency",
		about: fmt.Sprintf("Producers commit one event per transaction (`outbox.Publish`) on a steady schedule; a consumer on a queue bound "+
			"to the exchange notes when each event arrives. The latency is from the producer's COMMIT returning to the event's delivery. "+
			"The baseline is Plane's poller shape on bare pgx and amqp091-go: every %v it claims what is due (up to %d rows at a time, "+
			"`FOR UPDATE SKIP LOCKED`), publishes with confirms and deletes. warren is `relay.Run` at its defaults, woken by LISTEN/NOTIFY. "+
			"The first %v of each measurement is not counted. "+
			"Committed events/s says whether the %d producers kept their schedule. Producers, Postgres, RabbitMQ and the relay share the "+
			"machine's CPU; the poller claims 4 times a second, where a relay woken by every commit claims, publishes and settles "+
			"an event or a few at a time, so it takes CPU the producers would otherwise have had, and on 2 saturated cores they fall behind.",
			pollerInterval, rawClaimBatch, latencyWarmUp, producers),
		metrics: []metric{
			{name: "p50 ms", lowerBetter: true, target: target{bound: 5}},
			{name: "p99 ms", lowerBetter: true, target: target{bound: 50}},
			{name: "committed events/s"}, // whether the producers kept the schedule
		},
		size: func(e *env) string {
			return fmt.Sprintf("%d events/s for %v", e.latencyRate, e.latencyRun)
		},
		variants: []variant{
			{name: "raw: poll every 250 ms", baseline: true, run: measureLatency(runPoller)},
			{name: "warren: relay.Run, LISTEN/NOTIFY", run: measureLatency(runWarrenRelay),
				why: "the relay publishes with confirms and settles in Postgres before it takes the next batch; " +
					"on a saturated 2-core machine the scheduler's delays reach the tail."},
		},
	}
}

// runRelay runs one side's relay on ob until ctx ends.
type runRelay func(ctx context.Context, e *env, ob *outboxBench) error

// runPoller is the baseline: a loop that drains the outbox every
// pollerInterval.
func runPoller(ctx context.Context, e *env, ob *outboxBench) error {
	loop, err := newRawRelayLoop(ctx, e, ob)
	if err != nil {
		return err
	}
	defer loop.close()
	tick := time.NewTicker(pollerInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		for {
			n, err := loop.cycle(ctx, rawClaimBatch)
			if ctx.Err() != nil {
				return nil
			}
			if err != nil {
				return err
			}
			if n < rawClaimBatch {
				break
			}
		}
	}
}

func runWarrenRelay(ctx context.Context, e *env, ob *outboxBench) error {
	r, err := relay.New(relay.Config{Pool: ob.pool, AMQPURL: e.amqpURL, Exchange: ob.exchange, Table: ob.outbox.Name(),
		Name: "warren-bench-latency", Logger: discardLogger})
	if err != nil {
		return err
	}
	return r.Run(ctx)
}

// measureLatency produces e.latencyRate events a second for e.latencyRun
// through the outbox while run relays them, and returns the p50 and p99
// of the commit → delivery latency in milliseconds.
func measureLatency(run runRelay) func(ctx context.Context, e *env) (figures, error) {
	return func(ctx context.Context, e *env) (figures, error) {
		ob, err := newOutboxBench(ctx, e, 0)
		if err != nil {
			return nil, err
		}
		defer ob.close()
		total := int(e.latencyRun.Seconds() * float64(e.latencyRate))
		committed := make([]atomic.Int64, total) // unix nanoseconds of each event's commit
		arrived := make([]atomic.Int64, total)
		var received atomic.Int64

		conn, err := amqpx.Dial(ctx, e.amqpURL, amqpx.DialOptions{Name: "bench latency consumer"})
		if err != nil {
			return nil, err
		}
		defer conn.Close()
		ch, err := conn.Channel()
		if err != nil {
			return nil, err
		}
		deliveries, err := ch.Consume(ob.queue, "", true, false, false, false, nil)
		if err != nil {
			return nil, err
		}
		var consumer sync.WaitGroup
		consumer.Go(func() {
			for d := range deliveries {
				now := time.Now().UnixNano()
				if i, ok := eventIndex(d); ok && i < total {
					arrived[i].Store(now)
					received.Add(1)
				}
			}
		})
		defer consumer.Wait()
		defer ch.Close() // ends deliveries; runs before consumer.Wait

		relayCtx, stopRelay := context.WithCancel(ctx)
		defer stopRelay()
		relayErr := make(chan error, 1)
		go func() { relayErr <- run(relayCtx, e, ob) }()

		began := time.Now()
		if err := produce(ctx, ob, e.latencyRate, total, committed); err != nil {
			return nil, err
		}
		committedRate := float64(total) / time.Since(began).Seconds()
		deadline := time.Now().Add(30 * time.Second)
		for received.Load() < int64(total) {
			select {
			case err := <-relayErr:
				return nil, fmt.Errorf("relay stopped: %v", err)
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(10 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("%d of %d events arrived within 30s of the last commit", received.Load(), total)
			}
		}
		stopRelay()
		if err := <-relayErr; err != nil {
			return nil, err
		}

		skip := int(latencyWarmUp.Seconds() * float64(e.latencyRate))
		var ms []float64
		for i := skip; i < total; i++ {
			ms = append(ms, float64(arrived[i].Load()-committed[i].Load())/float64(time.Millisecond))
		}
		slices.Sort(ms)
		return figures{percentile(ms, 0.50), percentile(ms, 0.99), committedRate}, nil
	}
}

// produce commits total events, one per transaction, event i due at
// start + i/rate, from several goroutines, and notes when each commit
// returned.
func produce(ctx context.Context, ob *outboxBench, rate, total int, committed []atomic.Int64) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, producers)
	start := time.Now()
	for range producers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= total || ctx.Err() != nil {
					return
				}
				if wait := time.Until(start.Add(time.Duration(i) * time.Second / time.Duration(rate))); wait > 0 {
					time.Sleep(wait)
				}
				err := pgx.BeginFunc(ctx, ob.pool, func(tx pgx.Tx) error {
					_, err := ob.outbox.Publish(ctx, tx, sampleEvent(i))
					return err
				})
				if err != nil {
					errs <- err
					return
				}
				committed[i].Store(time.Now().UnixNano())
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs // nil when no producer failed
}

// eventIndex recovers i from the message id of sampleEvent(i).
func eventIndex(d amqp.Delivery) (int, bool) {
	if len(d.MessageId) < 12 {
		return 0, false
	}
	i, err := strconv.Atoi(d.MessageId[len(d.MessageId)-12:])
	return i, err == nil
}

// percentile of sorted values, by the nearest rank.
func percentile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(int(q*float64(len(sorted))), len(sorted)-1)]
}
