package amqpx

import (
	"context"
	"errors"
	"fmt"
	"sync"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Errors a publish can end with besides the context's own and a closed
// channel's. A caller that must not lose the message treats every error as
// "the broker does not have it".
var (
	// ErrNacked: the broker refused the message (a queue's overflow
	// policy, an internal error).
	ErrNacked = errors.New("broker nacked the message")
	// ErrUnroutable: the broker returned the message because no queue was
	// bound to take it (the publish is always mandatory).
	ErrUnroutable = errors.New("message was unroutable")
	// ErrClosed: the publisher's channel is closed.
	ErrClosed = errors.New("publisher is closed")
	// ErrNotSent is wrapped by errors for a message that certainly never
	// reached the broker (the channel was closed, or ctx ended while
	// waiting for an in-flight slot), so a caller may retry it without
	// counting an attempt. Any other error leaves that question open.
	ErrNotSent = errors.New("message was not sent")
)

// ReturnedError describes a message the broker returned under mandatory.
type ReturnedError struct {
	Exchange, RoutingKey string
	ReplyCode            uint16
	ReplyText            string
}

func (e *ReturnedError) Error() string {
	return fmt.Sprintf("message to exchange %q with routing key %q was returned: %d %s",
		e.Exchange, e.RoutingKey, e.ReplyCode, e.ReplyText)
}

// Is makes a ReturnedError match [ErrUnroutable].
func (e *ReturnedError) Is(target error) bool { return target == ErrUnroutable }

// Publisher publishes on one confirm-mode channel with many publishes in
// flight at once. Publish returns nil only when the broker has confirmed the
// message and did not return it, which is the point at which the caller may
// delete its own copy (ack a delivery, settle an outbox row).
//
// # How returns are matched to publishes
//
// RabbitMQ sends basic.return for a message before its basic.ack, and
// amqp091-go hands both to us from one reader goroutine in that order, so by
// the time a publish's confirmation resolves, its return (if any) is already
// in the returns buffer. Returns carry no delivery tag, so after its
// confirmation every publish drains the buffer and marks every outstanding
// publish with the same exchange, routing key and message id as returned.
// When two identical messages are in flight at once, a return for one fails
// both: a false failure causes a duplicate later, never a loss.
//
// amqp091-go drops a return it cannot hand over within five seconds, so the
// buffer must never fill: it holds twice the in-flight limit, and a publish
// keeps its in-flight slot until its confirmation resolves even when the
// caller stops waiting.
type Publisher struct {
	conn    *amqp.Connection
	ch      *amqp.Channel
	returns chan amqp.Return
	slots   chan struct{}
	closed  chan *amqp.Error

	mu       sync.Mutex
	inFlight map[returnKey][]*pending

	abandoned sync.WaitGroup // publishes whose caller stopped waiting
}

type returnKey struct{ exchange, routingKey, messageID string }

type pending struct{ returned *ReturnedError }

// NewPublisher opens a channel on conn, puts it in confirm mode and allows
// up to maxInFlight unconfirmed publishes (default 256). The two round
// trips are bounded by ctx and by SetupTimeout: a broker that does not
// answer in time gets conn closed under them (see [Bound]).
func NewPublisher(ctx context.Context, conn *amqp.Connection, maxInFlight int) (*Publisher, error) {
	if maxInFlight <= 0 {
		maxInFlight = 256
	}
	ctx, cancel := context.WithTimeout(ctx, SetupTimeout)
	defer cancel()
	var ch *amqp.Channel
	err := Bound(ctx, conn, func() (err error) {
		if ch, err = conn.Channel(); err != nil {
			return fmt.Errorf("open publish channel: %w", err)
		}
		if err := ch.Confirm(false); err != nil {
			CloseChannel(conn, ch)
			return fmt.Errorf("enable publisher confirms: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	p := &Publisher{
		conn:     conn,
		ch:       ch,
		returns:  ch.NotifyReturn(make(chan amqp.Return, 2*maxInFlight)),
		slots:    make(chan struct{}, maxInFlight),
		closed:   ch.NotifyClose(make(chan *amqp.Error, 1)),
		inFlight: map[returnKey][]*pending{},
	}
	return p, nil
}

// Publish sends msg with mandatory set and waits for the broker's verdict.
// It is safe for concurrent use. When ctx ends first, Publish returns ctx's
// error and the message may or may not have reached the broker, unless the
// error also wraps ErrNotSent.
//
// A send can block inside amqp091-go when the broker stops reading the
// socket (a memory or disk alarm blocks publishing connections), and the
// library does not watch ctx there. The send therefore runs on a goroutine
// of its own, so Publish returns on time; the stuck send keeps its slot
// until the connection unblocks or is closed (CloseConnection), and Close
// waits for it.
func (p *Publisher) Publish(ctx context.Context, exchange, routingKey string, msg amqp.Publishing) error {
	select {
	case p.slots <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("publish to %q/%q: %w: %w", exchange, routingKey, ErrNotSent, ctx.Err())
	}
	key := returnKey{exchange, routingKey, msg.MessageId}
	me := p.register(key)

	type sendResult struct {
		dc  *amqp.DeferredConfirmation
		err error
	}
	sent := make(chan sendResult, 1)
	go func() {
		dc, err := p.ch.PublishWithDeferredConfirm(exchange, routingKey, true, false, msg)
		sent <- sendResult{dc, err}
	}()
	var r sendResult
	select {
	case r = <-sent:
	case <-ctx.Done():
		p.abandoned.Go(func() {
			if r := <-sent; r.dc != nil {
				<-r.dc.Done()
			}
			p.finish(key, me)
		})
		return fmt.Errorf("publish to %q/%q: the send is stuck (broker blocked?): %w", exchange, routingKey, ctx.Err())
	}
	if r.err != nil {
		p.finish(key, me)
		if errors.Is(r.err, amqp.ErrClosed) {
			return fmt.Errorf("publish to %q/%q: %w: %w", exchange, routingKey, ErrNotSent, ErrClosed)
		}
		return fmt.Errorf("publish to %q/%q: %w: %w", exchange, routingKey, ErrNotSent, r.err)
	}
	dc := r.dc
	select {
	case <-dc.Done():
	case <-ctx.Done():
		// The slot stays taken until the broker answers or the channel
		// closes, which resolves every outstanding confirmation.
		p.abandoned.Go(func() {
			<-dc.Done()
			p.finish(key, me)
		})
		return fmt.Errorf("publish to %q/%q: no confirm: %w", exchange, routingKey, ctx.Err())
	}
	returned := p.finish(key, me)
	switch {
	case returned != nil:
		return returned
	case !dc.Acked():
		if p.ch.IsClosed() {
			return fmt.Errorf("publish to %q/%q: %w before the broker confirmed", exchange, routingKey, ErrClosed)
		}
		return fmt.Errorf("publish to %q/%q: %w", exchange, routingKey, ErrNacked)
	}
	return nil
}

func (p *Publisher) register(key returnKey) *pending {
	me := &pending{}
	p.mu.Lock()
	p.inFlight[key] = append(p.inFlight[key], me)
	p.mu.Unlock()
	return me
}

// finish drains the returns that have arrived, removes me from the
// in-flight set, frees its slot and says whether it was returned.
func (p *Publisher) finish(key returnKey, me *pending) *ReturnedError {
	p.mu.Lock()
	for drained := false; !drained; {
		select {
		case r, ok := <-p.returns:
			if !ok {
				drained = true
				break
			}
			rk := returnKey{r.Exchange, r.RoutingKey, r.MessageId}
			for _, other := range p.inFlight[rk] {
				other.returned = &ReturnedError{Exchange: r.Exchange, RoutingKey: r.RoutingKey, ReplyCode: r.ReplyCode, ReplyText: r.ReplyText}
			}
		default:
			drained = true
		}
	}
	list := p.inFlight[key]
	for i, other := range list {
		if other == me {
			list = append(list[:i], list[i+1:]...)
			break
		}
	}
	if len(list) == 0 {
		delete(p.inFlight, key)
	} else {
		p.inFlight[key] = list
	}
	p.mu.Unlock()
	<-p.slots
	return me.returned
}

// NotifyClose returns a channel that receives the reason the publisher's
// channel closed (nil for a clean close) and is then closed.
func (p *Publisher) NotifyClose() <-chan *amqp.Error { return p.closed }

// Close closes the channel, which fails every unconfirmed publish, and waits
// for abandoned publishes to release their slots. It returns within about
// CloseTimeout whatever the broker does: when the broker does not answer
// the close (it stopped reading the connection, or a send is stuck on the
// socket), Close closes the connection under the channel (see
// [CloseChannel]), which also fails the stuck sends.
func (p *Publisher) Close() error {
	err := CloseChannel(p.conn, p.ch)
	p.abandoned.Wait()
	return err
}
