package amqpx

import (
	"context"
	"errors"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// CloseTimeout is how long a stop path gives the broker to answer one
// round trip (a channel close, a consumer cancel, a connection close)
// before it closes the connection under it.
const CloseTimeout = 5 * time.Second

// SetupTimeout is how long starting work on a new connection (opening
// channels, declaring the topology) may take before the connection is
// given up and dialed again.
const SetupTimeout = 10 * time.Second

// ErrNoAnswer is wrapped by [Bound]'s error when the broker did not answer
// in time and the connection was closed.
var ErrNoAnswer = errors.New("the broker did not answer in time; connection closed")

// Bound runs op, which makes round trips to the broker on conn or its
// channels, until ctx ends. amqp091-go waits for a reply with no deadline,
// and a broker that stops reading a connection (RabbitMQ does so to
// publishers during a memory or disk alarm) while its heartbeats keep
// arriving never gives one. So when ctx ends first, Bound closes conn,
// which ends every wait on it and fails writes stuck on its socket, and
// returns once op has, with an error wrapping ErrNoAnswer and ctx's error.
//
// Closing the connection is the only way to get the library to let go; a
// caller on a stop path loses nothing by it, and one on a start path is
// about to retry on a new connection anyway.
func Bound(ctx context.Context, conn *amqp.Connection, op func() error) error {
	done := make(chan error, 1)
	go func() { done <- op() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	// The broker had its chance: close at once (a deadline in the past
	// fails the close's own write and read immediately).
	CloseConnection(conn, 0)
	err := <-done
	return fmt.Errorf("%w: %w (then: %v)", ErrNoAnswer, context.Cause(ctx), err)
}

// CloseChannel closes ch, a channel of conn, giving the broker
// CloseTimeout to agree before conn is closed under it (see [Bound]). A
// channel already closed is not an error.
func CloseChannel(conn *amqp.Connection, ch *amqp.Channel) error {
	ctx, cancel := context.WithTimeout(context.Background(), CloseTimeout)
	defer cancel()
	err := Bound(ctx, conn, ch.Close)
	if errors.Is(err, amqp.ErrClosed) {
		return nil
	}
	return err
}
