package consumer

import (
	"log/slog"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// ackVerdict is a worker's verdict on one delivery of a channel: ack or
// nack with requeue. (Settlement, exported, is what the observer is told.)
type ackVerdict struct {
	tag uint64
	ack bool // false: nack with requeue
}

// acker owns the acknowledgements of one channel. Workers finish deliveries
// out of order; the acker turns them into as few basic.ack frames as it
// safely can, which is what lets one channel go well past the rate of one
// ack per message.
//
// The broker numbers a channel's deliveries 1, 2, 3, … in order, so from the
// highest tag settled so far the acker knows every lower tag was delivered,
// and it tracks which of them are still unsettled (at most the prefetch
// window). A multiple ack up to tag T settles every outstanding delivery up
// to T, so the acker sends one only when no delivery at or below T is still
// being handled, and names a T that is itself an unsent ack (RabbitMQ
// rejects a multiple ack whose tag it no longer holds). Acks completed above
// an unsettled delivery — a slow handler — wait at most gapFlush and are
// then sent one by one, so one slow message never holds the prefetch window
// hostage.
type acker struct {
	ch    ackSender
	log   *slog.Logger
	in    chan ackVerdict
	batch int           // send once this many acks wait (a quarter of the prefetch window)
	stop  chan struct{} // closed to make run send what is pending and return
	done  chan struct{} // closed when run returns
	once  sync.Once     // closes stop

	maxSeen   uint64              // highest tag settled so far
	unsettled map[uint64]struct{} // tags ≤ maxSeen delivered but not yet settled
	toAck     map[uint64]struct{} // tags acked by a worker but not yet sent
}

const gapFlush = 20 * time.Millisecond

// ackDelay is the longest a completed ack waits for others to join it in
// one frame. The broker, not the consumer, is the bottleneck of a fast
// consumer, and every ack frame costs it work: measured with the bench
// (consume scenario), acking each burst at once ran at 0.83 of raw
// amqp091-go acking every 100 with multiple, batching up to a quarter of
// the prefetch window or 2ms at 1.07.
const ackDelay = 2 * time.Millisecond

// ackSender is the part of *amqp.Channel the acker uses.
type ackSender interface {
	Ack(tag uint64, multiple bool) error
	Nack(tag uint64, multiple, requeue bool) error
}

var _ ackSender = (*amqp.Channel)(nil)

func newAcker(ch ackSender, buffer int, log *slog.Logger) *acker {
	return &acker{
		ch:        ch,
		log:       log,
		in:        make(chan ackVerdict, buffer),
		batch:     max(1, buffer/4),
		stop:      make(chan struct{}),
		done:      make(chan struct{}),
		unsettled: map[uint64]struct{}{},
		toAck:     map[uint64]struct{}{},
	}
}

// settle hands a verdict to the acker. It never blocks once the acker has
// stopped: a delivery whose channel is gone cannot be settled anyway, and
// the broker requeues it.
func (a *acker) settle(s ackVerdict) {
	select {
	case a.in <- s:
	case <-a.done:
	}
}

// run applies verdicts until stop is closed, then sends what is
// pending.
func (a *acker) run() {
	defer close(a.done)
	gapTimer := time.NewTimer(gapFlush)
	gapTimer.Stop()
	batchTimer := time.NewTimer(ackDelay)
	batchTimer.Stop()
	batchArmed := false
	for {
		select {
		case s := <-a.in:
			a.apply(s)
			a.drain() // a burst of completions becomes one ack
			if len(a.toAck) >= a.batch {
				a.flush(false)
			} else if len(a.toAck) > 0 && !batchArmed {
				batchTimer.Reset(ackDelay)
				batchArmed = true
			}
			if len(a.toAck) > 0 {
				gapTimer.Reset(gapFlush)
			}
		case <-batchTimer.C:
			batchArmed = false
			a.flush(false)
		case <-gapTimer.C:
			a.flush(true)
		case <-a.stop:
			a.drain()
			a.flush(true)
			return
		}
	}
}

// drain applies every verdict already waiting.
func (a *acker) drain() {
	for {
		select {
		case s := <-a.in:
			a.apply(s)
		default:
			return
		}
	}
}

// stopAndFlush sends the pending acks and stops the acker. Verdicts
// handed over before it is called are sent; later ones are dropped, and
// their deliveries requeued by the broker when the channel closes.
func (a *acker) stopAndFlush() {
	a.once.Do(func() { close(a.stop) })
	<-a.done
}

func (a *acker) apply(s ackVerdict) {
	if s.tag > a.maxSeen {
		for t := a.maxSeen + 1; t < s.tag; t++ {
			a.unsettled[t] = struct{}{}
		}
		a.maxSeen = s.tag
	} else {
		delete(a.unsettled, s.tag)
	}
	if s.ack {
		a.toAck[s.tag] = struct{}{}
		return
	}
	// Requeue at once: the message should come back without waiting for
	// other deliveries.
	if err := a.ch.Nack(s.tag, false, true); err != nil {
		a.log.Debug("nack on a closed channel; the broker requeues the message", "tag", s.tag, "error", err)
	}
}

// flush sends one multiple ack for the acks below the lowest unsettled
// delivery and, when gaps is set, individual acks for the rest.
func (a *acker) flush(gaps bool) {
	if len(a.toAck) == 0 {
		return
	}
	frontier := a.maxSeen
	for t := range a.unsettled {
		frontier = min(frontier, t-1)
	}
	var top uint64
	for t := range a.toAck {
		if t <= frontier && t > top {
			top = t
		}
	}
	if top > 0 {
		a.send(top, true)
		for t := range a.toAck {
			if t <= top {
				delete(a.toAck, t)
			}
		}
	}
	if !gaps {
		return
	}
	for t := range a.toAck {
		a.send(t, false)
		delete(a.toAck, t)
	}
}

func (a *acker) send(tag uint64, multiple bool) {
	if err := a.ch.Ack(tag, multiple); err != nil {
		a.log.Debug("ack on a closed channel; the broker requeues the message", "tag", tag, "multiple", multiple, "error", err)
	}
}
