package amqpx

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
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
// arriving never gives one. So when ctx ends before op has returned, Bound
// closes conn, which ends every wait on it and fails writes stuck on its
// socket, and returns once op has, with an error wrapping ErrNoAnswer,
// ctx's error and op's own (so errors.As still finds what op returned).
// An op that returned first keeps its result, and conn is not touched,
// even if ctx ends at the same moment.
//
// Closing the connection is the only way to get the library to let go; a
// caller on a stop path loses nothing by it, and one on a start path is
// about to retry on a new connection anyway.
func Bound(ctx context.Context, conn *amqp.Connection, op func() error) error {
	return BoundNotify(ctx, conn, op, nil)
}

// BoundNotify is [Bound] that, when it is about to close conn, first calls
// closing (if not nil) with the error it will return, less op's part. A
// caller that owns conn learns why it closed before anything else on the
// connection sees it close.
func BoundNotify(ctx context.Context, conn *amqp.Connection, op func() error, closing func(error)) error {
	// Exactly one of two things happens first: op returns, or ctx's end is
	// acted on. The compare-and-swap decides which, so a connection is
	// closed only under an op that had not returned, and the error says so
	// exactly when it was.
	const (
		running = iota
		returned
		closed
	)
	var state atomic.Int32
	shut := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(shut)
		if !state.CompareAndSwap(running, closed) {
			return
		}
		if closing != nil {
			closing(fmt.Errorf("%w: %w", ErrNoAnswer, context.Cause(ctx)))
		}
		// The broker had its chance: close at once (a deadline in the past
		// fails the close's own write and read immediately).
		CloseConnection(conn, 0)
	})
	err := op()
	if state.CompareAndSwap(running, returned) {
		stop()
		return err
	}
	<-shut
	if err == nil {
		return fmt.Errorf("%w: %w", ErrNoAnswer, context.Cause(ctx))
	}
	return fmt.Errorf("%w: %w (then: %w)", ErrNoAnswer, context.Cause(ctx), err)
}

// CloseChannel closes ch, a channel of conn, giving the broker
// CloseTimeout to agree before conn is closed under it (see [Bound]). A
// channel already closed is not an error.
func CloseChannel(conn *amqp.Connection, ch *amqp.Channel) error {
	err := CloseChannelAnswered(conn, ch)
	if WasClosed(err) {
		return nil
	}
	return err
}

// CloseChannelAnswered is CloseChannel, except that it returns nil only
// when the broker answered the close (a channel already closed is an
// error). The broker handles a channel's methods in order, so its answer
// proves it handled everything sent on ch before the close: the acks
// among them, which AMQP 0-9-1 otherwise never confirms. (A quorum queue
// applies a removal through its replicated log: the loss of its leader
// before the entry is committed can still bring a message back, as a
// duplicate.)
func CloseChannelAnswered(conn *amqp.Connection, ch *amqp.Channel) error {
	ctx, cancel := context.WithTimeout(context.Background(), CloseTimeout)
	defer cancel()
	return Bound(ctx, conn, ch.Close)
}

// WasClosed reports whether err, from a close, says only that the channel
// was closed already.
func WasClosed(err error) bool {
	return errors.Is(err, amqp.ErrClosed) && !errors.Is(err, ErrNoAnswer)
}

// DeclareFanout declares the durable fanout exchange the relays publish
// to, on a channel of its own: a mismatch (an exchange of another type)
// closes that channel, not the publisher's.
func DeclareFanout(conn *amqp.Connection, exchange string) error {
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("open channel: %w", err)
	}
	defer ch.Close()
	if err := ch.ExchangeDeclare(exchange, amqp.ExchangeFanout, true, false, false, false, nil); err != nil {
		return fmt.Errorf("declare exchange %q: %w", exchange, err)
	}
	return nil
}
