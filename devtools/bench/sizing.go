package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/consumer"
	"github.com/warrenmq/warren/relay"
)

// The sizing scenarios (issue 19, docs/scaling.md) measure what one unit
// of deployment carries: a queue, a node, a consumer replica, a relay. They
// have no raw baseline: each compares its points with its first (one
// queue, one replica, one relay), in the same run, so the report gives
// ratios such as "÷ 1 queue" beside the rates.

// sizingQueues are the queue counts of the queues scenarios.
var sizingQueues = []int{1, 2, 4}

func sizingScenarios() []scenario {
	queues := func(broker string, on func(runFunc) runFunc) scenario {
		s := scenario{
			name: "sizing: queues, " + broker,
			about: fmt.Sprintf("How many messages one broker (%s) delivers from one queue and from several at once: a backlog of -messages events "+
				"split evenly over that many queues (each with its own topology), drained by one BaseConsumer per queue at its defaults "+
				"(%d channels, prefetch %d, %d workers), all in this process, all started once every queue is filled, with a no-op "+
				"handler. msg/s, all queues, is the total over the time the slowest consumer took; msg/s per queue divides it by the queues. "+
				"If the broker's throughput grew with its queues, the total would grow with them; it grows only as far as the cores "+
				"(shared with the clients, Postgres and Redis) allow.", broker, consumer.DefaultChannels, prefetch, consumer.DefaultWorkers),
			metrics: []metric{{name: "msg/s, all queues"}, {name: "msg/s per queue"}},
			ratioTo: "÷ 1 queue",
		}
		for i, n := range sizingQueues {
			s.variants = append(s.variants, variant{name: plural(n, "queue"), baseline: i == 0, run: on(warrenQueues(n))})
		}
		return s
	}
	replicas := func(label, broker string, setup warrenSetup, on func(runFunc) runFunc) scenario {
		s := scenario{
			name: "sizing: consumer replicas" + label + ", " + broker,
			about: fmt.Sprintf("One queue (%s) with a backlog of -messages events, drained by one BaseConsumer at its defaults "+
				"or by two with the same Config (two replicas of one service, here in one process, each with its own connection and "+
				"channels), with a no-op handler%s. msg/s per replica divides the total by the replicas.", broker, map[bool]string{
				true: " behind the Dedup middleware on the redis store (each replica a store of its own on the one Redis)", false: ""}[setup != nil]),
			metrics: []metric{{name: "msg/s, all replicas"}, {name: "msg/s per replica"}},
			ratioTo: "÷ 1 replica",
		}
		for i, n := range []int{1, 2} {
			s.variants = append(s.variants, variant{name: plural(n, "replica"), baseline: i == 0, run: on(warrenReplicas(n, setup))})
		}
		return s
	}
	single := func(run runFunc) runFunc { return run }
	return []scenario{
		queues(singleBroker, single),
		queues("single node, quorum", onQuorum),
		queues(clusterBroker, onCluster),
		replicas("", singleBroker, nil, single),
		replicas(" + redis dedup", singleBroker, warrenRedisDedup, single),
		replicas("", clusterBroker, nil, onCluster),
		{
			name: "sizing: relays",
			about: fmt.Sprintf("An outbox backlog of -messages rows drained by relay.Run at its defaults (batches of %d, %d loops) to an "+
				"exchange bound to one queue that keeps its last 1,000 messages: one relay on one table; two relays on one table (the "+
				"growth scenario's relays on one table: each a Name, an AMQP connection and a Postgres pool of its own, as two processes "+
				"would have); one process draining two tables, each with half the rows, with one relay.Run per table sharing one "+
				"Postgres pool (a relay serves one table; a process serves several by running one per table); and one relay on one "+
				"table publishing to a quorum queue, on the single node and on the bench's three-node cluster.", relay.DefaultBatchSize, relay.DefaultWorkers),
			ratioTo: "÷ 1 relay",
			variants: []variant{
				{name: "1 relay, 1 table, " + singleBroker, baseline: true, run: warrenRelays(1, nil)},
				{name: "2 relays, 1 table, " + singleBroker, run: warrenRelays(2, nil)},
				{name: "1 process, 2 tables, " + singleBroker, run: warrenRelayTables(2)},
				{name: "1 relay, 1 table, single node, quorum", run: onQuorum(warrenRelays(1, nil))},
				{name: "1 relay, 1 table, " + clusterBroker, run: onCluster(warrenRelays(1, nil))},
			},
		},
	}
}

// plural is "1 queue", "2 queues".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// perUnit is a sizing measurement's figures: the total rate of n units
// moving total messages in elapsed, and the rate per unit.
func perUnit(total, n int, elapsed time.Duration) figures {
	r := rate(total, elapsed)[0]
	return figures{r, r / float64(n)}
}

// warrenQueues drains e.messages events split over n queues, one
// BaseConsumer each, started together once every queue is filled.
func warrenQueues(n int) runFunc {
	return func(ctx context.Context, e *env) (figures, error) {
		per := e.messages / n
		filled := newBarrier(n)
		elapsed := make([]time.Duration, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				before := func(ctx context.Context, conn *amqp.Connection, queue string) error {
					return filled.wait(ctx, fill(ctx, e, conn, "", queue, per))
				}
				elapsed[i], errs[i] = runWarrenConsumer(ctx, e, nil, nil, warrenLoad{n: per, before: before})
				if errs[i] != nil {
					filled.fail() // runWarrenConsumer can fail before it fills
				}
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return nil, err
		}
		return perUnit(per*n, n, slices.Max(elapsed)), nil
	}
}

// warrenReplicas drains a backlog of e.messages events from one queue
// with n BaseConsumers of one Config, each behind what setup installs.
func warrenReplicas(n int, setup warrenSetup) runFunc {
	return func(ctx context.Context, e *env) (figures, error) {
		before := func(ctx context.Context, conn *amqp.Connection, queue string) error {
			return fill(ctx, e, conn, "", queue, e.messages)
		}
		elapsed, err := runWarrenConsumer(ctx, e, nil, setup, warrenLoad{n: e.messages, before: before, replicas: n})
		if err != nil {
			return nil, err
		}
		return perUnit(e.messages, n, elapsed), nil
	}
}

// warrenRelayTables drains e.messages rows split over n outbox tables,
// with one relay.Run per table in one process: the relays share the first
// table's Postgres pool, as one process's would.
func warrenRelayTables(n int) runFunc {
	return func(ctx context.Context, e *env) (figures, error) {
		per := e.messages / n
		obs := make([]*outboxBench, n)
		for i := range obs {
			ob, err := filledOutbox(ctx, e, per)
			if err != nil {
				return nil, err
			}
			defer ob.close()
			obs[i] = ob
		}
		shared := func(c *relay.Config) { c.Pool = obs[0].pool }
		elapsed := make([]time.Duration, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i, ob := range obs {
			wg.Go(func() { elapsed[i], errs[i] = drainWithRelays(ctx, e, ob, 1, per, shared) })
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return nil, err
		}
		return rate(per*n, slices.Max(elapsed)), nil
	}
}

// barrier lets n goroutines wait until all have arrived, or one has
// failed.
type barrier struct {
	mu      sync.Mutex
	left    int
	failed  bool
	arrived chan struct{} // closed when the last arrives or one fails
}

func newBarrier(n int) *barrier { return &barrier{left: n, arrived: make(chan struct{})} }

// wait arrives with err (the caller's work before the barrier) and waits
// for the others; it returns err, or an error if another failed.
func (b *barrier) wait(ctx context.Context, err error) error {
	if err != nil {
		b.fail()
		return err
	}
	b.mu.Lock()
	if b.left--; b.left == 0 && !b.failed {
		close(b.arrived)
	}
	b.mu.Unlock()
	select {
	case <-b.arrived:
	case <-ctx.Done():
		return ctx.Err()
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.failed {
		return errors.New("another measurement of the run failed before the barrier")
	}
	return nil
}

// fail releases the waiters with an error. Failing after everyone arrived
// changes nothing.
func (b *barrier) fail() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.left > 0 && !b.failed {
		b.failed = true
		close(b.arrived)
	}
}
