package dlqtool

import (
	"context"
	"errors"
	"fmt"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/dlq"
	"github.com/warrenmq/warren/internal/amqpx"
)

// ErrNoQueue is wrapped by the error of any operation that names a queue the
// broker does not have: the dead-letter queue itself, a message's origin
// queue, or a replay or import target.
var ErrNoQueue = errors.New("no such queue")

// ErrUnconfirmed is wrapped by the error of a replay or purge whose
// connection or channel failed before the broker answered the close of
// the channel it acknowledged messages on. AMQP confirms an ack only that
// way, so those messages may still be in the dead-letter queue: up to
// Result.Done of them, which counts the acks sent. A replay's copies are
// in their target all the same; replaying again sends those twice, which
// consumers that deduplicate on event id absorb. Count the queue to know.
var ErrUnconfirmed = errors.New("removal from the dead-letter queue not confirmed")

// Queue is one consumer's dead-letter queue, opened on a connection the
// caller owns. Its methods are safe for concurrent use; each runs on its own
// channels, so a failure in one leaves the others and the connection alone.
type Queue struct {
	conn     *amqp.Connection
	name     string
	consumer string
}

// Open returns the dead-letter queue named by name, which is either a
// consumer's name (its DLQ is [dlq.QueueName](name)) or the full name of a queue
// ending in ".dlq". The queue must exist: an error wrapping [ErrNoQueue]
// says when it does not.
//
// conn stays the caller's, with one exception: when the broker does not
// answer a round trip of Open or of any method in time (SetupTimeout for
// opening channels and publishers), the library closes conn to get out of
// the wait, and the method returns an error saying the broker did not
// answer in time. The Queue, and anything else on conn, must then be
// opened again on a new connection.
func Open(ctx context.Context, conn *amqp.Connection, name string) (*Queue, error) {
	queue, consumer, err := resolveName(name)
	if err != nil {
		return nil, err
	}
	q := &Queue{conn: conn, name: queue, consumer: consumer}
	if _, err := q.depth(ctx, queue); err != nil {
		if errors.Is(err, ErrNoQueue) {
			return nil, fmt.Errorf("dead-letter queue %q: %w (is %q the consumer's name?)", queue, ErrNoQueue, consumer)
		}
		return nil, err
	}
	return q, nil
}

// resolveName turns a consumer name or a DLQ name into both.
func resolveName(name string) (queue, consumer string, err error) {
	suffix := dlq.QueueName("") // ".dlq", which ends every DLQ's name
	switch {
	case name == "" || name == suffix:
		return "", "", errors.New("dlq: empty queue name")
	case len(name) > 255:
		return "", "", fmt.Errorf("dlq: queue name is %d bytes, AMQP allows 255", len(name))
	case dlq.IsQueueName(name):
		return name, strings.TrimSuffix(name, suffix), nil
	case len(dlq.QueueName(name)) > 255:
		return "", "", fmt.Errorf("dlq: dead-letter queue name for %q would exceed AMQP's 255 bytes", name)
	}
	return dlq.QueueName(name), name, nil
}

// Name is the dead-letter queue's name, e.g. "webhook.dlq".
func (q *Queue) Name() string { return q.name }

// Consumer is the name of the consumer the queue belongs to, e.g. "webhook".
func (q *Queue) Consumer() string { return q.consumer }

// Count returns the number of messages waiting in the dead-letter queue
// (messages another client holds unacknowledged are not counted).
func (q *Queue) Count(ctx context.Context) (int, error) {
	return q.depth(ctx, q.name)
}

// exchangeExists reports whether the broker has an exchange named name,
// asked like depth asks for a queue.
func (q *Queue) exchangeExists(ctx context.Context, name string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, amqpx.SetupTimeout)
	defer cancel()
	err := amqpx.Bound(ctx, q.conn, func() error {
		ch, err := q.conn.Channel()
		if err != nil {
			return fmt.Errorf("open channel: %w", err)
		}
		defer ch.Close() // within the bound
		return ch.ExchangeDeclarePassive(name, "x-consistent-hash", true, false, false, false, nil)
	})
	var amqpErr *amqp.Error
	if errors.As(err, &amqpErr) && amqpErr.Code == amqp.NotFound {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("inspect exchange %q: %w", name, err)
	}
	return true, nil
}

// depth returns the ready count of queue. It runs on a throwaway channel
// because the broker closes the channel of a passive declare that fails.
// The broker gets SetupTimeout to answer (less if ctx ends first), after
// which the connection is closed (see amqpx.Bound).
func (q *Queue) depth(ctx context.Context, queue string) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, amqpx.SetupTimeout)
	defer cancel()
	var info amqp.Queue
	err := amqpx.Bound(ctx, q.conn, func() error {
		ch, err := q.conn.Channel()
		if err != nil {
			return fmt.Errorf("open channel: %w", err)
		}
		defer ch.Close() // within the bound
		info, err = ch.QueueDeclarePassive(queue, false, false, false, false, nil)
		return err
	})
	if err != nil {
		var amqpErr *amqp.Error
		if errors.As(err, &amqpErr) && amqpErr.Code == amqp.NotFound {
			return 0, fmt.Errorf("queue %q: %w", queue, ErrNoQueue)
		}
		return 0, fmt.Errorf("inspect queue %q: %w", queue, err)
	}
	return info.Messages, nil
}
