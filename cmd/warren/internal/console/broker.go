package console

import (
	"context"
	"fmt"
	"sync"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/dlqtool"
	"github.com/warrenmq/warren/internal/amqpx"
)

// broker holds the AMQP connection the console's pages share, dialled when
// first needed and again after it closed (dlqtool closes it under a broker
// that stops answering), and one lock per dead-letter queue. Confirmed
// actions dial their own (withOwnConnection).
type broker struct {
	url string

	mu   sync.Mutex
	conn *amqp.Connection

	queues sync.Map // DLQ name → chan struct{}, a lock of capacity 1
}

// connection returns an open connection, dialling one if needed.
func (b *broker) connection(ctx context.Context) (*amqp.Connection, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.conn != nil && !b.conn.IsClosed() {
		return b.conn, nil
	}
	conn, err := amqpx.Dial(ctx, b.url, amqpx.DialOptions{Name: "warren console"})
	if err != nil {
		return nil, err
	}
	b.conn = conn
	return conn, nil
}

// withQueue opens the dead-letter queue name on the shared connection and
// runs f on it, alone: a dlqtool read holds the messages it has read until
// it ends, so a second operation on the same queue at the same time would
// see only part of it.
func (b *broker) withQueue(ctx context.Context, name string, f func(*dlqtool.Queue) error) error {
	conn, err := b.connection(ctx)
	if err != nil {
		return err
	}
	return b.locked(ctx, conn, name, f)
}

// withOwnConnection is withQueue on a connection of f's own, closed when f
// returns: for a confirmed action, which may run for an hour. On the
// shared connection, anything that closes it (a frame the client refuses
// in another queue's page, a page's channel error that takes the
// connection down) would stop the action part-way.
func (b *broker) withOwnConnection(ctx context.Context, name string, f func(*dlqtool.Queue) error) error {
	conn, err := amqpx.Dial(ctx, b.url, amqpx.DialOptions{Name: "warren console action"})
	if err != nil {
		return err
	}
	defer amqpx.CloseConnection(conn, amqpx.CloseTimeout)
	return b.locked(ctx, conn, name, f)
}

// locked opens the queue name on conn and runs f with its lock held.
func (b *broker) locked(ctx context.Context, conn *amqp.Connection, name string, f func(*dlqtool.Queue) error) error {
	q, err := dlqtool.Open(ctx, conn, name)
	if err != nil {
		return err
	}
	// The lock is a channel, not a sync.Mutex, so that waiting for it
	// ends with ctx: a page opened while an hour-long replay runs on the
	// same queue must not hold its goroutine (and the browser) until the
	// replay ends, nor after the browser gave up.
	l, _ := b.queues.LoadOrStore(q.Name(), make(chan struct{}, 1))
	lock := l.(chan struct{})
	select {
	case lock <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("%s: another action of this console is running on it: %w", q.Name(), ctx.Err())
	}
	defer func() { <-lock }()
	return f(q)
}

func (b *broker) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.conn != nil {
		amqpx.CloseConnection(b.conn, amqpx.CloseTimeout)
		b.conn = nil
	}
}
