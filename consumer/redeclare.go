package consumer

import (
	"context"
	"errors"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/internal/amqpx"
)

// publishCopy publishes msg through the default exchange to queue, one of
// the consumer's own (a retry tier or the DLQ). The broker returns a
// message for a queue that does not exist, which for our own queues means
// an operator deleted one: the topology is then declared again, once for
// all the workers that met the missing queue, and the publish tried once
// more, rather than requeueing the message into a loop that lasts until
// the consumer restarts.
func (c *BaseConsumer) publishCopy(s *session, queue string, msg amqp.Publishing) error {
	declared := s.declared.Load()
	err := c.publish(s, queue, msg)
	if !errors.Is(err, amqpx.ErrUnroutable) {
		return err
	}
	if derr := c.redeclare(s, declared); derr != nil {
		return fmt.Errorf("%w; declaring the topology again failed: %w", err, derr)
	}
	return c.publish(s, queue, msg)
}

// publish sends msg to queue and waits up to PublishTimeout for the
// broker's verdict. Not on the handler's context: a publish that has
// started must get its verdict even when shutdown cancels the handlers.
func (c *BaseConsumer) publish(s *session, queue string, msg amqp.Publishing) error {
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.PublishTimeout)
	defer cancel()
	pub := s.pub.Load()
	err := pub.Publish(ctx, "", queue, msg)
	switch {
	case err == nil:
		s.nacks.Record(amqpx.Destination("", queue), false, time.Now())
	case errors.Is(err, amqpx.ErrNacked):
		s.nacks.Record(amqpx.Destination("", queue), true, time.Now())
		if d, stale := s.nacks.Stale(time.Now(), amqpx.NackedSessionLimit); stale {
			c.renewPublisher(s, pub, d)
		}
	}
	return err
}

// renewPublisher replaces old, the session's publisher, with one on a new
// channel, because every publish on old to one target queue has been
// nacked for d, whatever its other queues' verdicts. RabbitMQ
// (3.10 at least) keeps nacking every publish to a quorum queue on a
// channel that first published to it while the queue's leader was being
// elected, until the old leader's node is back, which may be hours; a
// channel opened after the election is served at once. Without this, every
// failed event would go round (handled, its move nacked, requeued) until
// then. Only the publisher is replaced: the consumer channels, and the
// handlers running on them, go on. Publishes still waiting on old fail
// when it closes, and their messages are requeued, as for any failed
// move. A queue that refuses on purpose (reject-publish at its length
// limit) costs a new channel every few seconds and nothing else.
func (c *BaseConsumer) renewPublisher(s *session, old *amqpx.Publisher, d time.Duration) {
	s.renewMu.Lock()
	skip := s.closing || s.renewing || s.pub.Load() != old
	s.renewing = !skip
	s.renewMu.Unlock()
	if skip {
		return // the session is ending, or another worker renews it
	}
	// Opened outside the lock, so that a stop does not wait for it.
	pub, err := amqpx.NewPublisher(context.Background(), s.conn, c.cfg.Workers)
	s.renewMu.Lock()
	defer s.renewMu.Unlock()
	s.renewing = false
	switch {
	case s.closing:
		return // the connection is being closed, and pub with it
	case err != nil:
		s.fail(fmt.Errorf("open a new publish channel after every publish was nacked for %v: %w", d, err))
		return
	}
	s.watch(pub.NotifyClose())
	s.pub.Store(pub)
	s.nacks.Reset()
	c.stats.publishersRenewed.Add(1)
	c.log.Warn("every retry and dead-letter publish nacked, none confirmed; publishing on a new channel (a channel that first published to a quorum queue during its leader election stays refused)",
		"nacked_for", d)
	// Its close is the session's own doing, which watch ignores, and
	// never closes the connection under the consumer channels.
	s.background.Go(old.Retire)
}

// redeclare declares the topology on a fresh channel of s, unless it was
// declared again since the count was seen. It gets SetupTimeout, as the
// declaration on a new connection does, not what is left of a publish's
// PublishTimeout: a declaration that is merely slow must not cost the
// session and every ack in flight on it. A broker that does not answer
// in that time gets the connection closed (amqpx.Bound); the session is
// failed with that reason first, so the log and the Observer say the
// broker did not answer, not what the closing connection looks like to a
// forwarder ("queue deleted?"). The supervisor declares everything on the
// next connection.
func (c *BaseConsumer) redeclare(s *session, seen uint64) error {
	s.declareMu.Lock()
	defer s.declareMu.Unlock()
	if s.declared.Load() != seen {
		return nil // another worker did it meanwhile
	}
	c.log.Warn("a queue of the consumer's topology is missing (deleted by an operator?); declaring the topology again")
	if c.beforeRedeclare != nil {
		c.beforeRedeclare()
	}
	ctx, cancel := context.WithTimeout(context.Background(), amqpx.SetupTimeout)
	defer cancel()
	err := amqpx.BoundNotify(ctx, s.conn, func() error {
		return c.declareTopology(s.conn) // its channel closes within the bound
	}, func(err error) { s.fail(fmt.Errorf("declare the topology again: %w", err)) })
	if err == nil {
		s.declared.Add(1)
	}
	return err
}
