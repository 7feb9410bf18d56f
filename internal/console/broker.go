package console

import (
	"context"
	"fmt"
	"sync"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/dlqtool"
	"github.com/warrenmq/warren/internal/amqpx"
)

// broker holds the console's one AMQP connection, dialled when first
// needed and again after it closed (dlqtool closes it under a broker that
// stops answering), and one lock per dead-letter queue.
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

// withQueue opens the dead-letter queue name and runs f on it, alone: a
// dlqtool read holds the messages it has read until it ends, so a second
// operation on the same queue at the same time would see only part of it.
func (b *broker) withQueue(ctx context.Context, name string, f func(*dlqtool.Queue) error) error {
	conn, err := b.connection(ctx)
	if err != nil {
		return err
	}
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
