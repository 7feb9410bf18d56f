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
func (c *BaseConsumer) publishCopy(ctx context.Context, s *session, queue string, msg amqp.Publishing) error {
	declared := s.declared.Load()
	err := s.pub.Publish(ctx, "", queue, msg)
	if !errors.Is(err, amqpx.ErrUnroutable) {
		return err
	}
	if derr := c.redeclare(ctx, s, declared); derr != nil {
		return fmt.Errorf("%w; declaring the topology again failed: %w", err, derr)
	}
	return s.pub.Publish(ctx, "", queue, msg)
}

// redeclare declares the topology on a fresh channel of s, unless it was
// declared again since the count was seen. A declaration the broker does
// not answer within ctx closes the connection (amqpx.Bound), and the
// supervisor declares everything on the next one.
func (c *BaseConsumer) redeclare(ctx context.Context, s *session, seen uint64) error {
	s.declareMu.Lock()
	defer s.declareMu.Unlock()
	if s.declared.Load() != seen {
		return nil // another worker did it meanwhile
	}
	c.log.Warn("a queue of the consumer's topology is missing (deleted by an operator?); declaring the topology again")
	err := amqpx.Bound(ctx, s.conn, func() error {
		ch, err := s.conn.Channel()
		if err != nil {
			return fmt.Errorf("open channel: %w", err)
		}
		defer ch.Close() // within the bound
		return c.topo.declare(ch, c.cfg)
	})
	if err == nil {
		s.declared.Add(1)
	}
	return err
}
