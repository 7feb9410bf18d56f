package consumer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/internal/amqpx"
)

// session is one connection's worth of consuming: the consumer channels
// with their ackers and forwarders, and the publisher for retries and dead
// letters. When anything in it fails, the whole session is abandoned and a
// new one built on a new connection; a delivery keeps a pointer to the
// session it came from, so it is only ever acked on the channel that
// delivered it.
type session struct {
	conn *amqp.Connection
	// pub publishes retries and dead letters. It is replaced, not the
	// session, when every publish on it has been nacked for
	// amqpx.NackedSessionLimit (see renewPublisher).
	pub      atomic.Pointer[amqpx.Publisher]
	nacks    amqpx.NackStreak
	renewMu  sync.Mutex // guards renewing and closing
	renewing bool       // a replacement of pub is being opened
	closing  bool       // shutdown has begun: pub is not replaced any more
	channels []*amqp.Channel
	tags     []string
	ackers   []*acker
	prefetch int // per channel, within the memory budget (planSession)

	lost     chan error    // receives the first failure
	dead     atomic.Bool   // set once the session failed
	stop     chan struct{} // closed to stop the forwarders
	stopOnce sync.Once

	forwarders sync.WaitGroup
	background sync.WaitGroup // ackers and close watchers

	declareMu sync.Mutex    // one re-declaration at a time (publishCopy)
	declared  atomic.Uint64 // re-declarations so far

	parts *partitionSet // with Config.Partitions, instead of channels, ackers and forwarders
}

// job is one delivery on its way to a worker.
type job struct {
	d     amqp.Delivery
	s     *session
	acker *acker
}

var errConsumerCancelled = errors.New("the broker cancelled the consumer (queue deleted?)")

// startSession declares the topology and starts consuming on conn. On
// failure it closes conn and everything it started. When ctx ends or the
// broker takes longer than SetupTimeout to answer, conn is closed under
// the set-up: a stop must not wait for a broker that stopped reading.
func (c *BaseConsumer) startSession(ctx context.Context, conn *amqp.Connection, jobs chan<- job, run handlerRun) (*session, error) {
	s := &session{conn: conn, lost: make(chan error, 1), stop: make(chan struct{})}
	if c.topo.Partitioned() {
		s.parts = newPartitionSet(c, s, run)
	}
	plan, err := c.planSession(ctx)
	if err != nil {
		s.abandon()
		return nil, err
	}
	s.prefetch = plan.prefetch
	c.memory.Store(&plan)
	ctx, cancel := context.WithTimeout(ctx, amqpx.SetupTimeout)
	defer cancel()
	var streams []<-chan amqp.Delivery
	err = amqpx.Bound(ctx, conn, func() (err error) {
		streams, err = c.setUp(ctx, s)
		return err
	})
	if err != nil {
		s.abandon()
		return nil, err
	}
	// Only a session that started whole hands out work, and only once
	// Bound has said so: a job from one whose start then failed (a channel
	// refused, or the set-up cut off by ctx) would run on a channel about
	// to close, its ack lost and its message redelivered, a duplicate
	// effect. Until then the deliveries wait in the channels, and the
	// broker requeues them if the session is abandoned.
	if s.parts != nil {
		c.parts.Store(s.parts)
		s.parts.start()
		return s, nil
	}
	for i, deliveries := range streams {
		s.forwarders.Go(func() { s.forward(deliveries, s.ackers[i], jobs) })
	}
	return s, nil
}

// setUp opens the session's channels and consumers on s.conn and returns
// their delivery streams.
func (c *BaseConsumer) setUp(ctx context.Context, s *session) ([]<-chan amqp.Delivery, error) {
	conn := s.conn
	s.watch(conn.NotifyClose(make(chan *amqp.Error, 1)))
	s.background.Go(amqpx.WatchBlocked(conn, &c.block, c.blockChanged))

	if err := c.declareTopology(conn); err != nil {
		return nil, err
	}

	// Every worker may be publishing a retry or a dead letter at once.
	pub, err := amqpx.NewPublisher(ctx, conn, c.cfg.Workers)
	if err != nil {
		return nil, err
	}
	s.pub.Store(pub)
	s.watch(pub.NotifyClose())
	if s.parts != nil {
		return nil, s.parts.subscribeAll()
	}

	streams := make([]<-chan amqp.Delivery, 0, c.cfg.Channels)
	for i := range c.cfg.Channels {
		if c.beforeConsume != nil {
			if err := c.beforeConsume(i); err != nil {
				return nil, err
			}
		}
		ch, err := conn.Channel()
		if err != nil {
			return nil, fmt.Errorf("open consumer channel: %w", err)
		}
		s.watch(ch.NotifyClose(make(chan *amqp.Error, 1)))
		if err := ch.Qos(s.prefetch, 0, false); err != nil {
			return nil, fmt.Errorf("set prefetch: %w", err)
		}
		tag := fmt.Sprintf("%s-%d", c.connectionName(), i)
		deliveries, err := ch.Consume(c.topo.Queue, tag, false, false, false, false, nil)
		if err != nil {
			return nil, fmt.Errorf("consume %s: %w", c.topo.Queue, err)
		}
		a := newAcker(ch, s.prefetch, c.log)
		s.channels = append(s.channels, ch)
		s.tags = append(s.tags, tag)
		s.ackers = append(s.ackers, a)
		s.background.Go(a.run)
		streams = append(streams, deliveries)
	}
	return streams, nil
}

// blockChanged reports the broker's connection.blocked and unblocked. The
// broker blocks a publishing connection during a memory or disk alarm and
// stops reading it: retries, dead letters and acks wait until it lifts.
func (c *BaseConsumer) blockChanged(blocked bool, reason string) {
	switch {
	case blocked:
		c.stats.blocks.Add(1)
		c.log.Warn("the broker blocked this connection; retries, dead letters and acks wait until it lifts", "reason", reason)
	case reason == "":
		c.log.Info("the broker unblocked this connection")
	}
	c.observe.ObserveBlocked(c.cfg.Observer, c.cfg.Name, blocked, reason)
}

// watch turns a close notification into a session failure. A clean close
// (nil) is the session's own doing and not a failure.
func (s *session) watch(closed <-chan *amqp.Error) {
	s.background.Go(func() {
		if err, ok := <-closed; ok && err != nil {
			s.fail(err)
		}
	})
}

func (s *session) fail(err error) {
	if s.dead.CompareAndSwap(false, true) {
		s.lost <- err
	}
}

// forward hands deliveries to the workers until the session stops.
func (s *session) forward(deliveries <-chan amqp.Delivery, a *acker, jobs chan<- job) {
	for {
		select {
		case <-s.stop:
			return
		case d, ok := <-deliveries:
			if !ok {
				select {
				case <-s.stop:
				default:
					s.fail(errConsumerCancelled)
				}
				return
			}
			select {
			case jobs <- job{d: d, s: s, acker: a}:
			case <-s.stop:
				// Never handed to a worker; it is still unacked and the
				// broker requeues it when the channel closes.
				return
			}
		}
	}
}

func (s *session) stopForwarders() {
	s.stopOnce.Do(func() { close(s.stop) })
	s.forwarders.Wait()
	if s.parts != nil {
		s.parts.stopTaking()
	}
}

// stopConsuming asks the broker to stop sending and stops the forwarders.
// Channels stay open so in-flight handlers can still be acked. A broker
// that does not answer the cancels within CloseTimeout (it stopped reading
// the connection) gets the connection closed under them: the shutdown
// grace must not wait behind it. The handlers' acks are then lost and
// their messages redelivered, which is safe.
func (s *session) stopConsuming() {
	if s.parts != nil {
		// Partitions cancel no consumer: see partition.go.
		s.stopForwarders()
		return
	}
	s.stopOnce.Do(func() { close(s.stop) })
	ctx, cancel := context.WithTimeout(context.Background(), amqpx.CloseTimeout)
	defer cancel()
	_ = amqpx.Bound(ctx, s.conn, func() error {
		for i, ch := range s.channels {
			// Errors mean the channel is gone, which stops delivery too.
			_ = ch.Cancel(s.tags[i], false)
		}
		return nil
	})
	s.forwarders.Wait()
}

// close ends a healthy session after the workers have finished: pending
// acks are sent, then the connection is closed. Deliveries that were
// prefetched but never handled are requeued by the broker.
func (s *session) close() {
	s.stopForwarders()
	flushed := s.stopAckers()
	select {
	case <-flushed:
	case <-time.After(amqpx.CloseTimeout):
		// The broker is not reading (a blocked connection): the acks left
		// are lost and their messages redelivered, which is safe; hanging
		// here is not. The connection close then gets as long again.
	}
	s.shutdown(flushed)
}

// abandon tears down a failed session. Nothing can be acked on it any
// more; the broker requeues its unacked deliveries. Marking it dead first
// keeps workers from running jobs of it they have not started.
func (s *session) abandon() {
	s.dead.Store(true)
	if s.parts != nil {
		s.parts.abandon()
	}
	s.stopForwarders()
	s.shutdown(s.stopAckers())
}

// stopAckers has every acker send what it holds and stop, on a goroutine,
// since a send may be stuck on a blocked socket until shutdown closes it.
func (s *session) stopAckers() <-chan struct{} {
	stopped := make(chan struct{})
	ackers := s.ackers
	if s.parts != nil {
		ackers = s.parts.ackers()
	}
	go func() {
		for _, a := range ackers {
			a.stopAndFlush()
		}
		close(stopped)
	}()
	return stopped
}

// shutdown closes the connection with a deadline, which also fails writes
// stuck on its socket (an acker's or a publisher's), waits for the ackers
// to have stopped, then for the rest of the session's goroutines.
func (s *session) shutdown(ackersStopped <-chan struct{}) {
	s.renewMu.Lock()
	s.closing = true // no new publisher, nor its watcher, from here on
	s.renewMu.Unlock()
	amqpx.CloseConnection(s.conn, amqpx.CloseTimeout)
	if s.parts != nil {
		s.parts.waitRebalancer()
	}
	<-ackersStopped
	if pub := s.pub.Load(); pub != nil {
		pub.Close()
	}
	s.background.Wait()
}
