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
	sendTail *sendLink // the last batch given to Send

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
// error also wraps ErrNotSent. It is [Publisher.PublishBatch] of one
// message.
func (p *Publisher) Publish(ctx context.Context, exchange, routingKey string, msg amqp.Publishing) error {
	var err error
	p.PublishBatch(ctx, exchange, []Outgoing{{RoutingKey: routingKey, Msg: msg}}, func(_ int, e error) { err = e })
	return err
}

// Outgoing is one message of a batch: its routing key and the message.
type Outgoing struct {
	RoutingKey string
	Msg        amqp.Publishing
}

// PublishBatch sends msgs in order, each with mandatory set, and calls
// verdict(i, err) for each of them, in order, as soon as message i has its
// verdict; every message gets exactly one call before PublishBatch
// returns, on the caller's goroutine. err is nil only when the broker
// confirmed message i and did not return it; otherwise it is what
// [Publisher.Publish] returns for it. ctx bounds the whole batch: when it
// ends, every message without a verdict gets ctx's error, wrapping
// ErrNotSent for those that certainly never reached the broker (they
// waited for an in-flight slot, or came after one that did). It is safe
// for concurrent use.
//
// The batch is sent by one goroutine and its confirms are awaited by the
// caller, where a goroutine for every message would cost a context, a
// timer and two goroutines each. The send runs off the caller's goroutine
// because it can block inside amqp091-go when the broker stops reading the
// socket (a memory or disk alarm blocks publishing connections), and the
// library does not watch ctx there: the caller returns on time, and the
// stuck send keeps its slot until the connection unblocks or is closed
// (CloseConnection), which Close waits for.
func (p *Publisher) PublishBatch(ctx context.Context, exchange string, msgs []Outgoing, verdict func(i int, err error)) {
	b := p.newBatch(ctx, exchange, msgs)
	go p.sendBatch(ctx, exchange, msgs, b.send)
	b.Wait(verdict)
}

// Batch is a batch of messages handed to [Publisher.Send], whose verdicts
// [Batch.Wait] gives.
type Batch struct {
	p        *Publisher
	ctx      context.Context
	exchange string
	msgs     []Outgoing
	send     *batchSend
}

// sendLink is one batch of the chain Send keeps: done is closed once its
// sender stopped, and whole says (after done) whether it sent every message.
type sendLink struct {
	done  chan struct{}
	whole bool
}

// Send starts sending msgs, each with mandatory set, and returns at once,
// so that the caller can send more batches before the confirms of the
// first arrive. Batches given to Send on one publisher reach the channel
// one after another, in the order of the calls, never interleaved: their
// messages reach the broker in that order. A batch is sent only if every
// batch given to Send before it was sent whole: once one was not (its ctx
// ended, the channel closed), the ones after it send nothing and every
// message gets an error wrapping ErrNotSent, so that no message overtakes
// one before it. ctx bounds the send and the wait for the verdicts.
//
// Every batch must be waited for with [Batch.Wait], in the order they were
// sent, even one the caller no longer wants (with ctx ended, Wait returns
// at once): a batch holds its in-flight slots until then, and the batches
// after it may need them to be sent.
func (p *Publisher) Send(ctx context.Context, exchange string, msgs []Outgoing) *Batch {
	b := p.newBatch(ctx, exchange, msgs)
	if len(msgs) == 0 {
		// Nothing to send, nothing to order: kept out of the chain, where
		// a ctx that ends before its turn would count it as not sent
		// whole (and a Wait of nothing returns at once, so the caller may
		// end ctx at once).
		close(b.send.results)
		return b
	}
	link := &sendLink{done: make(chan struct{})}
	p.mu.Lock()
	prev := p.sendTail
	p.sendTail = link
	p.mu.Unlock()
	go func() {
		defer close(link.done)
		if prev != nil {
			select {
			case <-prev.done:
			case <-ctx.Done():
			}
			if ctx.Err() == nil && !prev.whole {
				b.send.refused = errEarlierNotSent
			}
			if ctx.Err() != nil || !prev.whole {
				close(b.send.results)
				return
			}
		}
		link.whole = p.sendBatch(ctx, exchange, msgs, b.send)
	}()
	return b
}

func (p *Publisher) newBatch(ctx context.Context, exchange string, msgs []Outgoing) *Batch {
	return &Batch{p: p, ctx: ctx, exchange: exchange, msgs: msgs, send: &batchSend{results: make(chan sent, len(msgs))}}
}

// Wait calls verdict(i, err) for each message of the batch, in order, as
// soon as message i has its verdict, as [Publisher.PublishBatch] does; every
// message gets exactly one call before Wait returns, on the caller's
// goroutine. Wait is called once per batch.
func (b *Batch) Wait(verdict func(i int, err error)) {
	p, ctx, exchange, msgs := b.p, b.ctx, b.exchange, b.msgs
	for i := range msgs {
		rk := msgs[i].RoutingKey
		var r sent
		var ok bool
		select {
		case r, ok = <-b.send.results:
		case <-ctx.Done():
		}
		if !ok { // ctx ended, and the sender may have stopped for it
			p.giveUp(ctx, exchange, msgs, i, nil, b.send, verdict)
			return
		}
		if r.err != nil {
			p.finish(r.key, r.me)
			verdict(i, notSent(exchange, rk, r.err))
			continue
		}
		select {
		case <-r.dc.Done():
		case <-ctx.Done():
			p.giveUp(ctx, exchange, msgs, i, &r, b.send, verdict)
			return
		}
		verdict(i, p.confirmed(exchange, rk, r))
	}
}

// notSent is the verdict on a message amqp091-go did not send.
func notSent(exchange, routingKey string, err error) error {
	if errors.Is(err, amqp.ErrClosed) {
		err = ErrClosed
	}
	return fmt.Errorf("publish to %q/%q: %w: %w", exchange, routingKey, ErrNotSent, err)
}

// batchSend is what the goroutine sending a batch shares with the caller
// waiting for its verdicts.
type batchSend struct {
	results chan sent // one for each message sent, in order; closed when the sender is done

	refused error // set before results is closed when Send sent nothing for a batch before it

	mu      sync.Mutex
	started int  // messages whose send has begun
	stopped bool // the caller gave up: send no more
}

// errEarlierNotSent is why Send sends nothing of a batch while its ctx
// lasts.
var errEarlierNotSent = errors.New("a batch sent before this one was not sent whole")

// sent is one message handed to amqp091-go: its deferred confirmation, or
// the error that kept it from the broker.
type sent struct {
	dc  *amqp.DeferredConfirmation
	err error
	key returnKey
	me  *pending
}

// sendBatch sends msgs in order, each once it has an in-flight slot, until
// they are all sent, ctx ends or the caller gives up. It reports whether
// amqp091-go took every message.
func (p *Publisher) sendBatch(ctx context.Context, exchange string, msgs []Outgoing, b *batchSend) (whole bool) {
	defer close(b.results)
	whole = true
	for _, m := range msgs {
		select {
		case p.slots <- struct{}{}:
		case <-ctx.Done():
			return false
		}
		b.mu.Lock()
		if b.stopped {
			b.mu.Unlock()
			<-p.slots
			return false
		}
		b.started++
		b.mu.Unlock()
		key := returnKey{exchange, m.RoutingKey, m.Msg.MessageId}
		me := p.register(key)
		dc, err := p.ch.PublishWithDeferredConfirm(exchange, m.RoutingKey, true, false, m.Msg)
		whole = whole && err == nil
		b.results <- sent{dc, err, key, me}
	}
	return whole
}

// confirmed is the verdict on a message whose confirmation resolved.
func (p *Publisher) confirmed(exchange, routingKey string, r sent) error {
	returned := p.finish(r.key, r.me)
	switch {
	case returned != nil:
		return returned
	case !r.dc.Acked():
		if p.ch.IsClosed() {
			return fmt.Errorf("publish to %q/%q: %w before the broker confirmed", exchange, routingKey, ErrClosed)
		}
		return fmt.Errorf("publish to %q/%q: %w", exchange, routingKey, ErrNacked)
	}
	return nil
}

// giveUp ends a batch whose ctx ended while the caller waited for message
// i (for its confirm when pending holds its send). Messages sent whose
// confirms are already in get their verdicts; the others get ctx's error,
// wrapping ErrNotSent for those the sender never began. Their in-flight
// slots stay taken until the broker answers or the channel closes, which
// resolves every outstanding confirmation, and Close waits for that.
func (p *Publisher) giveUp(ctx context.Context, exchange string, msgs []Outgoing, i int, pending *sent, b *batchSend, verdict func(int, error)) {
	cause := ctx.Err()
	if cause == nil {
		cause = b.refused
	}
	b.mu.Lock()
	b.stopped = true
	started := b.started
	b.mu.Unlock()
	var waiting []sent
	missing := false // a send begun has no result yet
	for ; i < len(msgs); i++ {
		rk := msgs[i].RoutingKey
		r := pending
		pending = nil
		if r == nil && i < started && !missing {
			// Results come in order: once one is missing (its send is
			// under way), the later ones are not looked for, or they
			// would be taken for its.
			select {
			case got, ok := <-b.results:
				if ok {
					r = &got
				}
			default:
			}
			missing = r == nil
		}
		switch {
		case i >= started:
			verdict(i, fmt.Errorf("publish to %q/%q: %w: %w", exchange, rk, ErrNotSent, cause))
		case r == nil:
			verdict(i, fmt.Errorf("publish to %q/%q: the send is stuck (broker blocked?): %w", exchange, rk, cause))
		case r.err != nil:
			p.finish(r.key, r.me)
			verdict(i, notSent(exchange, rk, r.err))
		case isDone(r.dc):
			verdict(i, p.confirmed(exchange, rk, *r))
		default:
			waiting = append(waiting, *r)
			verdict(i, fmt.Errorf("publish to %q/%q: no confirm: %w", exchange, rk, cause))
		}
	}
	p.abandoned.Go(func() {
		for _, r := range waiting {
			<-r.dc.Done()
			p.finish(r.key, r.me)
		}
		for r := range b.results { // sends that were under way
			if r.dc != nil {
				<-r.dc.Done()
			}
			p.finish(r.key, r.me)
		}
	})
}

func isDone(dc *amqp.DeferredConfirmation) bool {
	select {
	case <-dc.Done():
		return true
	default:
		return false
	}
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

// Retire closes the channel of a publisher that was replaced on a
// connection that goes on serving others. Unlike Close it never closes the
// connection: a broker that does not answer leaves Retire waiting until
// the connection ends for another reason, rather than cutting off the
// other channels' work (a consumer's unsent acks) with it.
func (p *Publisher) Retire() {
	p.ch.Close()
	p.abandoned.Wait()
}

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
