package consumer

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/internal/amqpx"
)

// Partitioned consumption (Config.Partitions; docs/partitions.md).
//
// Every replica subscribes to every partition queue, each on a channel of
// its own. The queues have x-single-active-consumer, so the broker
// delivers a partition's messages to one subscriber at a time, the
// earliest still subscribed, and to the next in line once that one's
// channel closes. A replica learns it is the active one when a delivery
// arrives; it cannot learn it earlier (RabbitMQ 3.10 tells a client
// nothing of its consumer's activity), so an active partition with
// nothing to deliver looks waiting.
//
// Per partition, one dispatcher takes the deliveries in order and settles
// each before it takes the next: acked, or dead-lettered (confirmed, then
// acked). A transient failure waits and runs the handler again in place.
// The dispatcher never nacks: RabbitMQ 3.10's quorum queues put a nacked
// message at the back of the queue, behind the events that came after
// it. A delivery the dispatcher cannot settle (shutdown, a lost
// connection) stays unacked and returns to the head of its queue, in
// order with the rest of the channel's unacked deliveries, when the
// channel closes.
//
// Shutdown cancels no consumer either: a cancelled active consumer hands
// the partition on at once, while its handler may still be running on
// the partition's previous event. A partition's channel closes only once
// its own dispatcher has returned, its handler finished: at once for an
// idle partition, so that another replica takes it while this one drains
// the others.

// partitionRetryCap bounds each in-place wait of a partitioned consumer:
// the partition, all the entities hashed to it, waits behind the failing
// event, and RetryDelays' later tiers (10m by default) are meant for a
// queue the rest of the events flow past.
const partitionRetryCap = 30 * time.Second

// partitionRetryDelay is how long a partition waits before running the
// handler again after a transient failure on attempt (1 for the first):
// RetryDelays as the tiers would, the hint's smallest delay at least as
// long or else the attempt's delay (the last for later attempts), capped
// at partitionRetryCap.
func partitionRetryDelay(delays []time.Duration, attempt int, hint time.Duration) time.Duration {
	var d time.Duration
	switch {
	case len(delays) == 0:
		d = hint
	case hint > 0:
		d = delays[len(delays)-1]
		for _, r := range delays {
			if r >= hint {
				d = r
				break
			}
		}
	default:
		d = delays[min(max(attempt-1, 0), len(delays)-1)]
	}
	return min(d, partitionRetryCap)
}

// partitionsToRelease decides which of the partitions a replica is active
// on (indices) it hands on, when replicas share n partitions: those past
// ceil(n/replicas), the highest indices first. Nothing when it is within.
func partitionsToRelease(n, replicas int, active []int) []int {
	fair := (n + max(replicas, 1) - 1) / max(replicas, 1)
	if len(active) <= fair {
		return nil
	}
	sorted := slices.Sorted(slices.Values(active))
	return sorted[fair:]
}

// rebalanceEvery is how often a replica counts the replicas and hands on
// the partitions past its fair share.
const rebalanceEvery = time.Second

// partitionSet is one session's partitions.
type partitionSet struct {
	c       *BaseConsumer
	s       *session
	h       handlerRun
	ctx     context.Context // the handlers' context, cancelled when the session is abandoned
	cancel  context.CancelFunc
	stop    chan struct{} // closed when the session stops taking deliveries
	stopped sync.Once

	mu    sync.Mutex   // guards parts, and re-subscribing against stopping
	parts []*partition // current subscription of each partition
	gen   atomic.Int64 // subscriptions so far, for unique consumer tags

	rebalancer chan struct{} // closed when the rebalancer has returned; nil until start
}

func newPartitionSet(c *BaseConsumer, s *session, h handlerRun) *partitionSet {
	ctx, cancel := context.WithCancel(h.ctx)
	return &partitionSet{c: c, s: s, h: h, ctx: ctx, cancel: cancel, stop: make(chan struct{})}
}

// partition is one subscription to a partition queue.
type partition struct {
	index      int
	queue      string
	ch         *amqp.Channel
	acker      *acker
	deliveries <-chan amqp.Delivery
	active     atomic.Bool     // a delivery arrived: this subscription is the partition's active consumer
	release    chan struct{}   // closed to make the dispatcher take no more deliveries, nor wait in place
	ctx        context.Context // the handler's: the session's, cancelled too when a release's grace ends
	cancel     context.CancelFunc
	exited     chan struct{} // closed when the dispatcher returned: nothing of it in flight

	handOnce sync.Once // handOver's work, done once by a release or a stop
	handErr  error
}

// handlerRun is what Run gives the sessions: the handler chain, the
// handlers' context, and the group Run's drain waits for.
type handlerRun struct {
	h       handlerFunc
	ctx     context.Context
	workers *sync.WaitGroup
}

type handlerFunc = func(ctx context.Context, p *partition, d amqp.Delivery, spent int) decision

// subscribeAll subscribes to every partition queue, during the session's
// set-up. The roster is not part of it: the rebalancer joins it (see
// joinRoster), and the partitions are consumed whether it can or not.
func (ps *partitionSet) subscribeAll() error {
	for i := range ps.c.topo.PartitionQueues {
		if ps.c.beforeConsume != nil {
			if err := ps.c.beforeConsume(i); err != nil {
				return err
			}
		}
		p, err := ps.subscribe(i)
		if err != nil {
			return err
		}
		ps.parts = append(ps.parts, p)
	}
	return nil
}

// subscribe opens a channel and subscribes it to partition i's queue, at
// the back of the line of its replicas' subscriptions.
func (ps *partitionSet) subscribe(i int) (*partition, error) {
	s, c := ps.s, ps.c
	queue := c.topo.PartitionQueues[i]
	ch, err := s.conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("open channel for partition %s: %w", queue, err)
	}
	s.watch(ch.NotifyClose(make(chan *amqp.Error, 1)))
	if err := ch.Qos(s.prefetch, 0, false); err != nil {
		return nil, fmt.Errorf("set prefetch: %w", err)
	}
	tag := fmt.Sprintf("%s-p%d-%d", c.connectionName(), i, ps.gen.Add(1))
	deliveries, err := ch.Consume(queue, tag, false, false, false, false, nil)
	if err != nil {
		return nil, fmt.Errorf("consume %s: %w", queue, err)
	}
	a := newAcker(ch, s.prefetch, c.log)
	s.background.Go(a.run)
	ctx, cancel := context.WithCancel(ps.ctx)
	return &partition{index: i, queue: queue, ch: ch, acker: a, deliveries: deliveries,
		release: make(chan struct{}), exited: make(chan struct{}), ctx: ctx, cancel: cancel}, nil
}

// start starts the dispatchers and the rebalancer, once the session's
// set-up has succeeded.
func (ps *partitionSet) start() {
	for _, p := range ps.parts {
		ps.h.workers.Go(func() { ps.dispatch(p) })
	}
	ps.rebalancer = make(chan struct{})
	go func() {
		defer close(ps.rebalancer)
		ps.rebalance()
	}()
}

// dispatch handles p's deliveries one at a time, in order, until the
// session stops or p is released.
func (ps *partitionSet) dispatch(p *partition) {
	defer close(p.exited)
	defer p.cancel()
	defer ps.setInactive(p)
	defer func() {
		// Stopping, with nothing of p in flight any more: hand p on at
		// once rather than after the whole drain, so that another replica
		// takes it while this one's other handlers finish. A failed
		// session's connection is closing anyway.
		select {
		case <-ps.stop:
			if !ps.s.dead.Load() {
				_ = ps.handOver(p)
			}
		default:
		}
	}()
	for {
		select { // stopping wins over a delivery that is waiting
		case <-ps.stop:
			return
		case <-p.release:
			return
		default:
		}
		select {
		case <-ps.stop:
			return
		case <-p.release:
			return
		case d, ok := <-p.deliveries:
			if !ok {
				select {
				case <-ps.stop:
				default:
					ps.s.fail(fmt.Errorf("partition %s: %w", p.queue, errConsumerCancelled))
				}
				return
			}
			if p.active.CompareAndSwap(false, true) {
				ps.c.stats.activePartitions.Add(1)
				ps.c.stats.partitionsTaken.Add(1)
				ps.c.log.Info("partition taken", "partition", p.index, "queue", p.queue)
			}
			if !ps.c.handlePartitioned(ps, p, d) {
				// Not settled: the partition cannot go past it. It returns
				// to the head of the queue when the channel closes.
				return
			}
		}
	}
}

func (ps *partitionSet) setInactive(p *partition) {
	if p.active.Load() {
		ps.c.stats.activePartitions.Add(-1)
	}
}

// stopping reports whether the session stopped taking deliveries or died,
// or p is being released.
func (ps *partitionSet) stopping(p *partition) bool {
	select {
	case <-ps.stop:
		return true
	case <-p.release:
		return true
	case <-p.ctx.Done():
		return true
	default:
		return ps.s.dead.Load()
	}
}

// wait holds partition p for d, reporting false if the session stopped
// or died, or p is being released, first: no wait in place holds up a
// release or a stop.
func (ps *partitionSet) wait(p *partition, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ps.stop:
		return false
	case <-p.release:
		return false
	case <-p.ctx.Done():
		return false
	}
}

// handlePartitioned runs one delivery of partition p to its end: retried
// in place after each transient failure until it succeeds, is skipped, or
// goes to the DLQ (confirmed, then acked). It reports false when it could
// not settle the delivery (the session stopped or died), which is then
// left unacked.
func (c *BaseConsumer) handlePartitioned(ps *partitionSet, p *partition, d amqp.Delivery) bool {
	obs := c.cfg.Observer
	j := job{d: d, s: ps.s, acker: p.acker}
	for spent := 0; ; {
		if ps.s.dead.Load() {
			return false
		}
		c.stats.received.Add(1)
		c.stats.inFlight.Add(1)
		c.stats.lastMessage.Store(time.Now().UnixNano())
		if obs != nil {
			c.observe.Call("Received", func() { obs.Received(c.cfg.Name) })
		}
		v := ps.h.h(p.ctx, p, d, spent)
		settled, retry := true, false
		s := v.Settlement
		switch v.Disposition {
		case Retried, Deferred:
			if ps.stopping(p) {
				// No retry in place waits out a stop or a release: the
				// delivery stays unacked and returns to the head of its
				// queue when the channel closes (handOver), where the
				// next replica in line, or this one, takes it again.
				c.stats.requeued.Add(1)
				s, settled = Settlement{Disposition: Requeued}, false
				break
			}
			retry = true
			if v.Disposition == Retried {
				c.stats.retried.Add(1)
			} else {
				c.stats.deferred.Add(1)
				if v.Unavailable {
					c.stats.unavailable.Add(1)
				}
			}
			c.log.LogAttrs(ps.ctx, slog.LevelDebug, "retrying in place", append(eventAttrs(d, v),
				slog.String("queue", p.queue), slog.Duration("delay", v.delay), slog.Int("attempt", v.attempt), slog.Any("error", v.err))...)
		default:
			s, settled = c.actPartitioned(ps, p, j, v)
		}
		c.stats.lastSettled.Store(time.Now().UnixNano())
		c.stats.inFlight.Add(-1)
		if obs != nil {
			c.observe.Call("Settled", func() { obs.Settled(c.cfg.Name, s) })
		}
		if !retry {
			return settled
		}
		if !ps.wait(p, v.delay) {
			return false
		}
		if v.Disposition == Retried {
			spent++
		}
	}
}

// actPartitioned carries out v for a partition: acks, or moves the
// message to the DLQ and acks it once the broker confirmed the copy. A
// failed publish is tried again every second, the partition held, for as
// long as the session lives. Requeued, the shutdown's verdict, is not
// sent: the channel's close returns the message to the head of the queue.
func (c *BaseConsumer) actPartitioned(ps *partitionSet, p *partition, j job, v decision) (Settlement, bool) {
	if v.unrouted {
		c.noteUnrouted(p.ctx, v.eventType)
	}
	s := v.Settlement
	switch v.Disposition {
	case Requeued:
		c.stats.requeued.Add(1)
		return s, false
	case DeadLettered:
		for {
			err := c.publishCopy(j.s, v.queue, copyOf(j.d, v, j.s.conn.Config.FrameSize))
			if err == nil {
				break
			}
			c.stats.publishFailures.Add(1)
			c.log.LogAttrs(ps.ctx, slog.LevelError, "could not dead-letter the message; its partition waits and tries again",
				append(eventAttrs(j.d, v), slog.String("to", v.queue), slog.Any("error", err))...)
			if !ps.wait(p, time.Second) {
				c.stats.requeued.Add(1)
				return Settlement{Disposition: Requeued}, false
			}
		}
		c.stats.moved(movedDead).Add(1)
		c.log.LogAttrs(ps.ctx, movedDead.level(), movedDead.String(), append(eventAttrs(j.d, v),
			slog.String("to", v.queue), slog.String("class", string(v.Class)), slog.Int("attempt", v.attempt), slog.Any("error", v.err))...)
		j.acker.settle(ackVerdict{tag: j.d.DeliveryTag, ack: true})
	default:
		c.ack(j, v.Disposition)
	}
	return s, true
}

// rosterRetryWarnEvery is how often, at most, the rebalancer warns that it
// cannot join or count the roster; the failures between are logged at
// Debug.
const rosterRetryWarnEvery = 30 * time.Second

// rebalance hands on, every rebalanceEvery, the partitions this replica
// is active on past its fair share, ceil(partitions/replicas). It keeps
// this replica on the roster, joining it again whenever it was lost (the
// queue deleted, its node down); while it cannot, the replica goes on
// consuming the partitions it is active on without rebalancing. Every
// round trip it makes is bounded like the session's others: one the
// broker does not answer in time closes the connection and fails the
// session.
func (ps *partitionSet) rebalance() {
	t := time.NewTicker(rebalanceEvery)
	defer t.Stop()
	var r *rosterSub
	defer func() { r.close(ps) }()
	var warned time.Time // last warning about the roster; zero while it works
	trouble := func(msg string, err error) {
		if time.Since(warned) < rosterRetryWarnEvery {
			ps.c.log.Debug(msg, "roster", ps.c.topo.Replicas, "error", err)
			return
		}
		warned = time.Now()
		ps.c.log.Warn(msg+"; the partitions are consumed without rebalancing until it works again", "roster", ps.c.topo.Replicas, "error", err)
	}
	n := len(ps.c.topo.PartitionQueues)
	for first := true; ; first = false {
		if !first {
			select {
			case <-ps.stop:
				return
			case <-t.C:
			}
		}
		if r != nil && r.isLost() {
			trouble("lost this replica's consumer on the roster queue (deleted? its node down?); joining it again", nil)
			r.close(ps)
			r = nil
		}
		if r == nil {
			var err error
			if r, err = ps.joinRoster(); err != nil {
				if ps.s.dead.Load() {
					return
				}
				trouble("could not join the roster queue", err)
				continue
			}
			if !warned.IsZero() {
				ps.c.log.Info("joined the roster queue again; rebalancing resumes", "roster", ps.c.topo.Replicas)
				warned = time.Time{}
			}
		}
		replicas, err := ps.replicas(r.ch)
		if err != nil {
			if ps.s.dead.Load() {
				return
			}
			trouble("could not count the replicas on the roster queue", err)
			r.close(ps) // a refused declare closed its channel, and the consumer with it
			r = nil
			continue
		}
		if ps.c.rebalanced != nil {
			ps.c.rebalanced(replicas)
		}
		active := ps.active()
		release := partitionsToRelease(n, replicas, active)
		for _, i := range release {
			ps.c.log.Info("releasing partition", "partition", i, "queue", ps.c.topo.PartitionQueues[i],
				"active_on", len(active), "replicas", replicas, "fair_share", len(active)-len(release))
			if !ps.releasePartition(i) {
				return
			}
		}
	}
}

// rosterSub is this replica's consumer on the roster queue, on a channel
// of its own whose failures are not the session's: the roster is not
// needed to consume, only to rebalance.
type rosterSub struct {
	ch   *amqp.Channel
	lost chan struct{} // closed when the broker ended the consumer, or the channel closed
}

func (r *rosterSub) isLost() bool {
	select {
	case <-r.lost:
		return true
	default:
		return false
	}
}

func (r *rosterSub) close(ps *partitionSet) {
	if r != nil {
		_ = ps.bounded(amqpx.CloseTimeout, r.ch.Close)
	}
}

// joinRoster subscribes this replica to the roster queue. A roster that
// exists is taken as it is, whatever its type (before quorum rosters,
// warren declared it classic: a classic one on a cluster lives on one
// node, and is unavailable while that node is down, but that only stops
// the rebalancing). A missing one is declared with the partitions' queue
// type: a quorum roster lives on as long as the partitions do. RabbitMQ
// 3.10's quorum queue without single active consumer reports every
// consumer in its declare-ok (measured), as a classic queue does.
func (ps *partitionSet) joinRoster() (*rosterSub, error) {
	name := ps.c.topo.Replicas
	var r *rosterSub
	err := ps.bounded(amqpx.SetupTimeout, func() error {
		d := &declarer{conn: ps.s.conn}
		exists, err := d.exists("queue", name)
		if err == nil && !exists {
			var args amqp.Table
			if ps.c.cfg.QueueType == Quorum {
				args = amqp.Table{"x-queue-type": string(Quorum)}
			}
			err = d.declareQueue(queueSpec{name, args})
		}
		if err == nil {
			err = d.do(func(ch *amqp.Channel) error {
				tag := fmt.Sprintf("%s-roster", ps.c.connectionName())
				deliveries, err := ch.Consume(name, tag, true, false, false, false, nil)
				if err != nil {
					return err
				}
				r = &rosterSub{ch: ch, lost: make(chan struct{})}
				ps.s.background.Go(func() {
					defer close(r.lost)
					for range deliveries { // nothing is published to it; whatever is, is dropped
					}
				})
				return nil
			})
		}
		if err != nil {
			d.close()
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("join roster %s: %w", name, err)
	}
	return r, nil
}

// bounded runs op, which makes round trips on the session's connection,
// for at most timeout; past it the connection is closed under op (see
// amqpx.Bound) and the session fails.
func (ps *partitionSet) bounded(timeout time.Duration, op func() error) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return amqpx.BoundNotify(ctx, ps.s.conn, op, ps.s.fail)
}

// replicas is how many replicas there are: the consumers of the roster
// queue, one per replica, asked on the roster's channel. (The partition
// queues cannot say: RabbitMQ 3.10's quorum queues with single active
// consumer count only the active consumer.)
func (ps *partitionSet) replicas(ch *amqp.Channel) (int, error) {
	var n int
	err := ps.bounded(amqpx.SetupTimeout, func() error {
		info, err := ch.QueueDeclarePassive(ps.c.topo.Replicas, true, false, false, false, nil)
		n = info.Consumers
		return err
	})
	return n, err
}

// active lists the partitions this replica is active on. A partition
// being released is not.
func (ps *partitionSet) active() []int {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	var out []int
	for _, p := range ps.parts {
		select {
		case <-p.release:
			continue
		default:
		}
		if p.active.Load() {
			out = append(out, p.index)
		}
	}
	return out
}

// releasePartition hands partition i on to the next replica in line: its
// dispatcher takes no more deliveries; once the event in flight is
// settled (acked, or confirmed in the DLQ and acked) and the acks are
// sent, the channel closes, which returns its prefetched deliveries to the
// head of the queue and makes the next subscriber active; then the
// replica subscribes again, at the back of the line. Until the channel
// has closed no other replica gets the partition's events, and after it
// this one has nothing of them in flight: two replicas never handle one
// partition at once. It reports false when the session stopped or failed
// meanwhile.
//
// A release is bounded like a stop (awaitRelease): a retry or a deferral
// waiting in place ends at once, a running handler gets ShutdownGrace.
func (ps *partitionSet) releasePartition(i int) bool {
	ps.mu.Lock()
	p := ps.parts[i]
	ps.mu.Unlock()
	close(p.release)
	if !ps.awaitRelease(p) {
		return false
	}
	if err := ps.handOver(p); err != nil {
		ps.s.fail(fmt.Errorf("release partition %s: %w", p.queue, err))
		return false
	}
	if p.active.Load() {
		ps.c.stats.partitionsReleased.Add(1)
		ps.c.log.Info("partition released", "partition", i, "queue", p.queue)
	}
	select {
	case <-ps.stop:
		return false
	default:
	}
	// Subscribed again outside ps.mu, which Health takes: the round trips
	// may take up to SetupTimeout.
	var np *partition
	err := ps.bounded(amqpx.SetupTimeout, func() (err error) {
		np, err = ps.subscribe(i)
		return err
	})
	if err != nil {
		ps.s.fail(fmt.Errorf("subscribe again to partition %s: %w", p.queue, err))
		return false
	}
	ps.mu.Lock()
	select {
	case <-ps.stop:
		// Stopped meanwhile: no dispatcher may join the drain now. The
		// new subscription goes; whatever it was sent returns to the
		// queue when its channel closes.
		ps.mu.Unlock()
		np.acker.stopAndFlush()
		_ = ps.bounded(amqpx.CloseTimeout, np.ch.Close)
		return false
	default:
	}
	ps.parts[i] = np
	ps.h.workers.Go(func() { ps.dispatch(np) })
	ps.mu.Unlock()
	return true
}

// awaitRelease waits for released p's dispatcher to return, as Run's drain
// waits for a stop's: a wait in place ends at once (see wait), leaving
// its delivery unacked; a running handler may finish within
// ShutdownGrace, then its context is cancelled; one that ignores that for
// abandonAfter more fails the session, whose closing connection returns
// the partition's unacked deliveries to its queue. Nothing is acked on
// the way that was not handled, or confirmed in the DLQ, first. It
// reports false if the session stopped (the shutdown drains p instead) or
// failed.
func (ps *partitionSet) awaitRelease(p *partition) bool {
	for _, phase := range []time.Duration{ps.c.cfg.ShutdownGrace, abandonAfter} {
		t := time.NewTimer(phase)
		select {
		case <-p.exited:
			t.Stop()
			return true
		case <-ps.stop:
			t.Stop()
			return false
		case <-t.C:
		}
		if p.ctx.Err() == nil {
			ps.c.log.Warn("released partition's handler still running after the shutdown grace; cancelling it", "partition", p.index, "queue", p.queue, "grace", ps.c.cfg.ShutdownGrace)
			p.cancel()
		}
	}
	ps.s.fail(fmt.Errorf("release partition %s: its handler ignored cancellation for %v", p.queue, abandonAfter))
	return false
}

// handOver ends p's subscription once its dispatcher has returned: it
// sends p's pending acks, then closes p's channel, which returns p's
// unacked deliveries to the head of the queue and makes the next replica
// in line active. The acks go out before the channel closes, or their
// deliveries would come back; a broker that does not answer within
// CloseTimeout gets the connection closed, and the session fails. Done
// once, by a release or by a stop, whichever comes first.
func (ps *partitionSet) handOver(p *partition) error {
	p.handOnce.Do(func() {
		if p.handErr = ps.bounded(amqpx.CloseTimeout, func() error { p.acker.stopAndFlush(); return nil }); p.handErr != nil {
			return
		}
		p.handErr = ps.bounded(amqpx.CloseTimeout, p.ch.Close)
	})
	return p.handErr
}

// stopTaking makes the dispatchers take no more deliveries and the
// rebalancer stop. It does not wait for the rebalancer, whose round trip
// may be out to a broker that stopped reading: the session's shutdown
// waits for it once the connection is closed (waitRebalancer).
// Consumers are not cancelled and channels stay open: see the top of this
// file.
func (ps *partitionSet) stopTaking() {
	ps.mu.Lock()
	ps.stopped.Do(func() { close(ps.stop) })
	ps.mu.Unlock()
}

// waitRebalancer waits for the rebalancer to return. Called once the
// connection is closed, which ends any round trip it waits on.
func (ps *partitionSet) waitRebalancer() {
	if ps.rebalancer != nil {
		<-ps.rebalancer
	}
}

// abandon is stopTaking for a failed session, whose handlers' contexts
// are cancelled too: their events can no longer be acked here, and the
// broker hands the partitions to other replicas.
func (ps *partitionSet) abandon() {
	ps.cancel()
	ps.stopTaking()
}

// ackers are the current subscriptions' ackers.
func (ps *partitionSet) ackers() []*acker {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	out := make([]*acker, 0, len(ps.parts))
	for _, p := range ps.parts {
		out = append(out, p.acker)
	}
	return out
}
