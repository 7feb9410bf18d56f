package consumer

import (
	"context"
	"errors"
	"fmt"

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
	return s.pub.Publish(ctx, "", queue, msg)
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
