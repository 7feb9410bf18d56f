package main

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/internal/amqpx"
	"github.com/warrenmq/warren/outbox"
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

// latencyScenarios is the latency scenario at each rate, one scenario
// per rate so that each has its own targets.
func latencyScenarios(rates []int) []scenario {
	out := make([]scenario, len(rates))
	for i, rate := range rates {
		out[i] = latencyScenario(rate)
	}
	return out
}

// keptSchedule is the share of the target rate the producers must commit
// for the schedule to count as kept (issue 17).
const keptSchedule = 0.97

func latencyScenario(rate int) scenario {
	notifyWhenIdle, everyCommit := outbox.Options{}, outbox.Options{Notify: outbox.NotifyEveryCommit}
	return scenario{
		name: fmt.Sprintf("commit → publish latency, %d events/s", rate),
		about: fmt.Sprintf("Producers commit one event per transaction (`outbox.Publish`) on a steady schedule of %d events/s; a consumer on a queue bound "+
			"to the exchange notes when each event arrives. The latency is from the producer's COMMIT returning to the event's delivery. "+
			"The baseline is Plane's poller shape on bare pgx and amqp091-go: every %v it claims what is due (up to %d rows at a time, "+
			"`FOR UPDATE SKIP LOCKED`), publishes with confirms and deletes; its producers write with `NotifyWhenIdle`, since Plane's send "+
			"no NOTIFY and nothing listens. warren is `relay.Run` at its defaults (PollMin 2ms, woken by LISTEN/NOTIFY), "+
			"with the producers' outbox at its default (`NotifyWhenIdle`: a NOTIFY only when no other row is due) and with "+
			"`NotifyEveryCommit` (a NOTIFY in every transaction, the default before). "+
			"The references run the producers alone, with no relay: what the %d producers reach on this machine at all, so that a "+
			"shortfall can be told apart from a slowdown the relay causes. The first %v of each measurement is not counted. "+
			"Committed events/s says whether the producers kept their schedule (the target: at least %.2f× the rate). "+
			"Postgres serialises the commits of transactions that sent a NOTIFY on one database-wide lock held through the commit's "+
			"WAL flush, so when every transaction notifies they commit one flush at a time, without group commit.",
			rate, pollerInterval, rawClaimBatch, producers, latencyWarmUp, keptSchedule),
		metrics: latencyMetrics(rate, 5, 50),
		size:    latencySize(rate),
		variants: []variant{
			// Plane's producers send no NOTIFY; NotifyWhenIdle is the nearest
			// outbox option, and with a 250 ms poller a due row is nearly
			// always waiting, so the baseline's producers hardly notify.
			{name: "raw: poll every 250 ms", baseline: true, run: measureLatency(rate, runPoller, notifyWhenIdle)},
			{name: "reference: producers alone, NotifyEveryCommit", reference: true, run: measureLatency(rate, nil, everyCommit)},
			{name: "reference: producers alone, NotifyWhenIdle", reference: true, run: measureLatency(rate, nil, notifyWhenIdle)},
			{name: "warren: relay.Run, NotifyEveryCommit", run: measureLatency(rate, runWarrenRelay(nil), everyCommit),
				why: "every producer's transaction sends a NOTIFY, and Postgres commits notifying transactions one WAL flush at a time " +
					"(see the reference without a relay); the relay's own work then takes CPU from the producers."},
			{name: "warren: relay.Run and outbox at their defaults (NotifyWhenIdle, PollMin 2ms)", run: measureLatency(rate, runWarrenRelay(nil), notifyWhenIdle),
				why: "on 2 cores shared by the producers, Postgres, RabbitMQ, the relay and (here) other engineers' runs, the relay's CPU and " +
					"the scheduler's delays come out of the producers' schedule and the latency's tail; compare the producers alone."},
		},
	}
}

// latencyMetrics are a latency scenario's metrics at rate: the p50 and
// p99 bounds in milliseconds, and the producers keeping their schedule.
func latencyMetrics(rate int, p50, p99 float64) []metric {
	return []metric{
		{name: "p50 ms", lowerBetter: true, target: target{bound: p50}},
		{name: "p99 ms", lowerBetter: true, target: target{bound: p99}},
		{name: "committed events/s", target: target{bound: keptSchedule * float64(rate)}},
	}
}

func latencySize(rate int) func(e *env) string {
	return func(e *env) string {
		return fmt.Sprintf("%d events/s for %v", rate, e.latencyRun)
	}
}

// runRelay runs one side's relay on ob until ctx ends. It calls ready
// once producers may start: at once for a relay that finds rows however
// they were written, after its setup for one that must exist before the
// rows do (the CDC relay's slot).
type runRelay func(ctx context.Context, e *env, ob *outboxBench, ready func()) error

// startedRelay is a runRelay running on its own goroutine.
type startedRelay struct {
	cancel context.CancelFunc
	done   chan struct{} // closed when run returned, err set
	err    error
}

// startRelay starts run on ob and returns once it is ready. Whatever
// happens next, the caller must call stop before it removes ob: a relay
// still running would find its table gone, and a CDC relay's slot can be
// dropped only once its stream has ended.
func startRelay(ctx context.Context, e *env, ob *outboxBench, run runRelay) (*startedRelay, error) {
	rctx, cancel := context.WithCancel(ctx)
	r := &startedRelay{cancel: cancel, done: make(chan struct{})}
	ready := make(chan struct{})
	var once sync.Once
	go func() {
		defer close(r.done)
		r.err = run(rctx, e, ob, func() { once.Do(func() { close(ready) }) })
	}()
	select {
	case <-ready:
		return r, nil
	case <-r.done:
		return nil, fmt.Errorf("relay stopped before it was ready: %v", r.err)
	case <-ctx.Done():
		r.stop()
		return nil, ctx.Err()
	}
}

// stop ends the relay and returns what it returned; it may be called
// more than once.
func (r *startedRelay) stop() error {
	r.cancel()
	<-r.done
	return r.err
}

// runPoller is the baseline: a loop that drains the outbox every
// pollerInterval.
func runPoller(ctx context.Context, e *env, ob *outboxBench, ready func()) error {
	loop, err := newRawRelayLoop(ctx, e, ob)
	if err != nil {
		return err
	}
	defer loop.close()
	ready()
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

// runWarrenRelay runs relay.Run at its defaults, changed by tune where
// it is not nil.
func runWarrenRelay(tune func(*relay.Config)) runRelay {
	return func(ctx context.Context, e *env, ob *outboxBench, ready func()) error {
		cfg := relay.Config{Pool: ob.pool, AMQPURL: e.amqpURL, Exchange: ob.exchange, Table: ob.outbox.Name(),
			Name: "warren-bench-latency", Logger: discardLogger}
		if tune != nil {
			tune(&cfg)
		}
		r, err := relay.New(cfg)
		if err != nil {
			return err
		}
		// Its first claim, at start, finds what was written before.
		ready()
		return r.Run(ctx)
	}
}

// measureLatency produces rate events a second for e.latencyRun through
// an outbox opened with opts while run relays them, and returns the p50
// and p99 of the commit → delivery latency in milliseconds and the rate
// the producers committed at. With run nil the producers run alone, with
// no relay and no consumer: the rate they reach on this machine by
// themselves, the latencies NaN (not measured).
func measureLatency(rate int, run runRelay, opts outbox.Options) func(ctx context.Context, e *env) (figures, error) {
	return func(ctx context.Context, e *env) (figures, error) {
		ob, err := latencyOutbox(ctx, e, opts)
		if err != nil {
			return nil, err
		}
		defer ob.close()
		total := int(e.latencyRun.Seconds() * float64(rate))
		committed := make([]atomic.Int64, total) // unix nanoseconds of each event's commit
		if run == nil {
			committedRate, err := produce(ctx, ob, rate, total, committed)
			return figures{math.NaN(), math.NaN(), committedRate}, err
		}
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
				// An event's first arrival is its latency; a duplicate
				// (at least once allows them) is not counted twice.
				if i, ok := eventIndex(d); ok && i < total && arrived[i].CompareAndSwap(0, now) {
					received.Add(1)
				}
			}
		})
		defer consumer.Wait()
		defer ch.Close() // ends deliveries; runs before consumer.Wait

		rel, err := startRelay(ctx, e, ob, run)
		if err != nil {
			return nil, err
		}
		defer rel.stop() // before ob.close, deferred earlier

		committedRate, err := produce(ctx, ob, rate, total, committed)
		if err != nil {
			return nil, err
		}
		deadline := time.Now().Add(30 * time.Second)
		for received.Load() < int64(total) {
			select {
			case <-rel.done:
				return nil, fmt.Errorf("relay stopped: %v", rel.err)
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(10 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("%d of %d events arrived within 30s of the last commit", received.Load(), total)
			}
		}
		if err := rel.stop(); err != nil {
			return nil, err
		}

		skip := int(latencyWarmUp.Seconds() * float64(rate))
		var ms []float64
		for i := skip; i < total; i++ {
			ms = append(ms, float64(arrived[i].Load()-committed[i].Load())/float64(time.Millisecond))
		}
		slices.Sort(ms)
		return figures{percentile(ms, 0.50), percentile(ms, 0.99), committedRate}, nil
	}
}

// latencyOutbox is a new outbox bench whose producers write through an
// outbox opened with opts.
func latencyOutbox(ctx context.Context, e *env, opts outbox.Options) (*outboxBench, error) {
	ob, err := newOutboxBench(ctx, e, 0)
	if err != nil {
		return nil, err
	}
	if ob.outbox, err = outbox.Open(ob.outbox.Name(), opts); err != nil {
		ob.close()
		return nil, err
	}
	return ob, nil
}

// produce commits total events, one per transaction, event i due at
// start + i/rate (with rate 0, as fast as they can), from several
// goroutines, notes when each commit returned, and returns the rate at
// which they committed.
func produce(ctx context.Context, ob *outboxBench, rate, total int, committed []atomic.Int64) (float64, error) {
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
				if wait := time.Until(start.Add(time.Duration(i) * time.Second / time.Duration(max(rate, 1)))); rate > 0 && wait > 0 {
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
	return float64(total) / time.Since(start).Seconds(), <-errs // nil when no producer failed
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
