package dlqtool

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/internal/amqpx"
)

// Progress says how far an operation has got. Operations report it to an
// optional callback after each message and return the final counts.
type Progress struct {
	// Total is the number of messages the operation will look at: the
	// queue's depth when it began (for import, the messages given).
	Total int `json:"total"`
	// Scanned is how many of them it has looked at so far.
	Scanned int `json:"scanned"`
	// Matched is how many of those the filter selected (up to the limit).
	Matched int `json:"matched"`
	// Done is how many of those were replayed, purged, exported or
	// imported. In a dry run it stays 0.
	Done int `json:"done"`
	// ForeignOrigin counts, in a replay without a target queue, the
	// matched messages whose headers name an origin queue other than the
	// one the dead-letter queue belongs to. Those headers are not trusted
	// (a producer can forge them): each such message is replayed into the
	// dead-letter queue's own queue like the rest.
	ForeignOrigin int `json:"foreign_origin,omitempty"`
	// Unlisted counts, for a [Filter] with Fingerprints, the messages that
	// matched everything else but were not among those listed (they
	// arrived or changed after the list was made): left where they were.
	Unlisted int `json:"unlisted,omitempty"`
}

// idleWait is how long a scan waits for a delivery before it asks the
// broker whether the messages it counted at the start are still there. A
// variable so that a test can make the question constant.
var idleWait = 500 * time.Millisecond

// visitFunc sees one delivery of a scan, in queue order, with its decoded
// form. It may ack the delivery; whatever it leaves unacknowledged goes back
// to the queue in its place when the scan ends. It returns false to end the
// scan early.
type visitFunc func(d *amqp.Delivery, m *Message) (more bool, err error)

// scan walks the messages that are in the queue when it starts, head first,
// each exactly once. It keeps p's Total and Scanned up to date and calls
// progress, if set, after each visit.
//
// It consumes without acknowledging. Everything visit does not ack stays
// owned by the broker, which puts it back in its original place when the
// scan's channel closes, whether scan returns, fails or the process dies.
// That is what makes reading a dead-letter queue non-destructive, and a
// replay or purge interrupted at any point lose nothing. (RabbitMQ marks
// such messages redelivered; nothing in warren treats that as a failure.)
//
// The consumer's prefetch bounds how many unacknowledged messages the
// broker pushes at once. Messages a filtered operation skips must stay
// unacknowledged until the end, so they hold on to their prefetch slots;
// see prefetchFor.
func (q *Queue) scan(ctx context.Context, prefetch int, p *Progress, progress func(Progress), visit visitFunc) error {
	return q.scanThen(ctx, prefetch, p, progress, visit, nil)
}

// scanThen is scan with end, if set, called with the scan's error once the
// last visit is over but before the channel closes, while the deliveries
// it saw can still be acked; what end returns is the scan's error.
func (q *Queue) scanThen(ctx context.Context, prefetch int, p *Progress, progress func(Progress), visit visitFunc, end func(error) error) (err error) {
	total, err := q.Count(ctx)
	p.Total = total
	if err != nil || total == 0 {
		return err
	}
	if prefetch < 0 || prefetch > math.MaxUint16 {
		prefetch = 0
	}
	r, err := q.openRead(ctx, prefetch)
	if r.ch != nil {
		defer func() { err = q.closeRead(ctx, r, total, end, err) }()
	}
	if err != nil {
		return err
	}
	return q.readAll(ctx, r, total, p, progress, visit)
}

// queueRead is one scan's consumer on the queue.
type queueRead struct {
	ch         *amqp.Channel
	closed     chan *amqp.Error
	deliveries <-chan amqp.Delivery
	acks       *ackCounter
}

// openRead starts consuming the queue on a channel of its own with
// prefetch. A channel is returned with an error that came after it
// opened: closeRead must close it.
func (q *Queue) openRead(ctx context.Context, prefetch int) (queueRead, error) {
	r := queueRead{acks: &ackCounter{}}
	startCtx, cancel := context.WithTimeout(ctx, amqpx.SetupTimeout)
	defer cancel()
	err := amqpx.Bound(startCtx, q.conn, func() error {
		var err error
		if r.ch, err = q.conn.Channel(); err != nil {
			return fmt.Errorf("open channel: %w", err)
		}
		if err := r.ch.Qos(prefetch, 0, false); err != nil {
			return fmt.Errorf("set prefetch on %q: %w", q.name, err)
		}
		r.closed = r.ch.NotifyClose(make(chan *amqp.Error, 1))
		if r.deliveries, err = r.ch.Consume(q.name, scanTag, false, false, false, false, nil); err != nil {
			return fmt.Errorf("read %q: %w", q.name, err)
		}
		return nil
	})
	return r, err
}

// closeRead ends a read of total messages whose scan ended with err: end,
// if set, first, then the channel's close. It returns the scan's error.
func (q *Queue) closeRead(ctx context.Context, r queueRead, total int, end func(error) error, err error) error {
	if end != nil {
		err = end(err)
	}
	// Bounded: a broker that stopped reading (an alarm blocks a replay's
	// publishing connection) must not hang the way out. The broker
	// requeues whatever was not acked when the channel, or the connection
	// under it, closes.
	//
	// The close's answer is also the only proof that the acks sent before
	// it took effect: an ack is written and forgotten, and one lost with
	// the connection leaves its message queued, though counted done.
	cerr := amqpx.CloseChannelAnswered(q.conn, r.ch)
	if cerr == nil || amqpx.WasClosed(cerr) {
		q.awaitHandBack(ctx, total-r.acks.n)
	}
	if cerr != nil && r.acks.n > 0 {
		err = errors.Join(err, fmt.Errorf("%w: the channel failed before the broker confirmed the removal of the %d messages acknowledged; some may still be in %q (count it): %w", ErrUnconfirmed, r.acks.n, q.name, cerr))
	}
	return err
}

// readAll hands each of the total messages counted at the start to visit,
// until visit says stop or fails, or the messages that are left went to
// another client.
func (q *Queue) readAll(ctx context.Context, r queueRead, total int, p *Progress, progress func(Progress), visit visitFunc) error {
	idle := time.NewTimer(idleWait)
	defer idle.Stop()
	idleC := idle.C
	cancelled := false
	for seen := 0; seen < total; {
		if !cancelled {
			idle.Reset(idleWait)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("reading %q: %w", q.name, ctx.Err())
		case d, ok := <-r.deliveries:
			if !ok {
				return q.readEnded(r, cancelled)
			}
			r.acks.inner, d.Acknowledger = d.Acknowledger, r.acks
			m := newMessage(seen, publishingOf(&d))
			m.replayTo = q.consumer
			seen++
			p.Scanned = seen
			more, err := visit(&d, &m)
			if progress != nil {
				progress(*p)
			}
			if err != nil || !more {
				return err
			}
		case <-idleC:
			// Nothing arrived for a while. The messages counted at the
			// start may have been taken by another client, in which case
			// the scan is over rather than stuck.
			n, err := q.Count(ctx)
			if err != nil {
				return err
			}
			if n > 0 {
				continue
			}
			// None is ready, but that does not mean none is coming: the
			// broker counts a message it has sent to this scan, still in
			// the socket or in amqp091-go's buffer, as unacknowledged, not
			// ready. Ending here would silently cut a peek or an export
			// short on a busy machine. Cancelling settles it: the broker
			// sends every delivery it dispatched to this consumer before
			// the cancel-ok, and amqp091-go hands them over before it
			// closes deliveries, so the loop reads on until that close.
			if err := q.cancelRead(ctx, r.ch); err != nil {
				return fmt.Errorf("reading %q: end the read: %w", q.name, err)
			}
			cancelled, idleC = true, nil
		}
	}
	return nil
}

// readEnded says why the deliveries closed before every message counted
// was seen.
func (q *Queue) readEnded(r queueRead, cancelled bool) error {
	if cancelled {
		// Every delivery the broker sent before it confirmed the cancel
		// has now been seen: the rest of the messages counted at the
		// start went to another client.
		return nil
	}
	// amqp091-go reports a channel's closing before it closes the
	// deliveries, so an empty closed means the broker cancelled the
	// consumer: the queue went away.
	select {
	case err := <-r.closed:
		return fmt.Errorf("reading %q: channel closed: %w", q.name, errOrClosed(err))
	default:
		return fmt.Errorf("reading %q: the broker cancelled the read (was the queue deleted?): %w", q.name, ErrNoQueue)
	}
}

// ackCounter counts the deliveries a scan's visitor acknowledged, which
// the broker removes; every other one it hands back when the scan's
// channel closes. All deliveries of a scan share one channel, so one inner
// acknowledger serves them all.
type ackCounter struct {
	inner amqp.Acknowledger
	n     int
}

func (a *ackCounter) Ack(tag uint64, multiple bool) error {
	err := a.inner.Ack(tag, multiple)
	if err == nil && !multiple {
		a.n++
	}
	return err
}

func (a *ackCounter) Nack(tag uint64, multiple, requeue bool) error {
	return a.inner.Nack(tag, multiple, requeue)
}

func (a *ackCounter) Reject(tag uint64, requeue bool) error { return a.inner.Reject(tag, requeue) }

// handBackWait bounds how long a scan waits, after closing its channel, for
// the broker to count the messages it handed back as ready again.
const handBackWait = 5 * time.Second

// awaitHandBack waits until the queue holds at least want ready messages
// again, for at most handBackWait. The broker answers a channel's close
// before it has put that channel's unacknowledged messages back: a quorum
// queue does it through its log, a moment later. A read that returned in
// that moment would leave the next one, which counts ready messages to
// know what to read, to find the queue short or empty: `warren dlq ls`
// and then `warren dlq replay` in a script would replay nothing. Messages
// another client takes meanwhile keep the count short; the bound ends the
// wait then.
func (q *Queue) awaitHandBack(ctx context.Context, want int) {
	deadline := time.Now().Add(handBackWait)
	for {
		n, err := q.Count(ctx)
		if err != nil || n >= want || time.Now().After(deadline) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// cancelRead cancels a scan's consumer on ch. Like every round trip of a
// Queue (see Open), the broker gets SetupTimeout to answer, however long
// ctx lasts: one that stopped reading the connection would otherwise hold
// the scan for good, since its heartbeats keep the connection alive.
func (q *Queue) cancelRead(ctx context.Context, ch *amqp.Channel) error {
	ctx, cancel := context.WithTimeout(ctx, amqpx.SetupTimeout)
	defer cancel()
	return amqpx.Bound(ctx, q.conn, func() error { return ch.Cancel(scanTag, false) })
}

// scanTag is the consumer tag of a scan; each scan has a channel of its own.
const scanTag = "warren-dlqtool-scan"

// ackWindow is the prefetch of a scan that acks every message it is given
// (an unfiltered replay or purge): enough to keep the broker busy, and few
// enough that during a long, rate-limited replay the rest of the queue
// stays ready in the broker, where other tools count it, rather than
// sitting unacknowledged in this client's memory.
const ackWindow = 256

// prefetchFor is the prefetch a scan may use. A scan holds every message it
// does not ack until it ends, so a bound is safe only where that cannot
// stall it: when every message counts toward the limit, or when every
// message is acked (acksAll) and so frees its slot.
func prefetchFor(f Filter, limit int, acksAll bool) int {
	switch {
	case !f.IsZero():
		return 0
	case acksAll && limit > 0:
		return min(limit, ackWindow)
	case acksAll:
		return ackWindow
	}
	return max(limit, 0)
}

func errOrClosed(err *amqp.Error) error {
	if err == nil {
		return amqp.ErrClosed
	}
	return err
}
