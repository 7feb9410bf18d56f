package dlqtool

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/internal/amqpx"
)

// DefaultDrainTimeout is how long a replay or import interrupted by its
// context still waits for the broker to confirm the message it is
// publishing, when the options do not say.
const DefaultDrainTimeout = 5 * time.Second

// Result is what a replay, purge or import did.
type Result struct {
	Progress
	// DryRun is set when nothing was changed: Matched says what would have
	// been done.
	DryRun bool `json:"dry_run"`
	// Queues counts, per destination queue, the messages sent there (in a
	// dry run, that would have been sent there). Empty for a purge.
	Queues map[string]int `json:"queues,omitempty"`
}

// ReplayOptions select and pace a [Queue.Replay].
type ReplayOptions struct {
	Filter Filter
	// Limit is the most messages to replay. 0 means all that match.
	Limit int
	// Rate caps replays per second, to spare a consumer that has just
	// recovered. 0 means as fast as the broker confirms.
	Rate float64
	// DryRun selects and counts without publishing or removing anything.
	DryRun bool
	// To sends every message to this queue instead of the queue the
	// dead-letter queue belongs to.
	To string
	// DrainTimeout bounds the wait for the confirm of the message in
	// flight when ctx ends. Default [DefaultDrainTimeout].
	DrainTimeout time.Duration
	// Progress, if set, is called after each message looked at.
	Progress func(Progress)
	// OnMatch, if set, is called with each message the replay takes (in a
	// dry run, would take), before it is published: a dry run can list
	// their [Message.Fingerprint]s, for the replay confirmed next to take
	// exactly those.
	OnMatch func(*Message)
}

// Replay sends matching messages back to the queue the dead-letter queue
// belongs to (the consumer's queue, [Queue.Consumer]) or to opts.To, through
// the default exchange: only the consumer whose queue it is sees them again,
// never the other consumers of the exchange the event was first published
// to.
//
// The origin queue a message's headers name ([Message.Origin]) does not
// choose the target: a producer can forge those headers, and a replay
// publishes with the operator's rights. A message whose headers name
// another queue goes to the dead-letter queue's own queue like the rest,
// and is counted in [Progress].ForeignOrigin.
//
// The messages are published one at a time, in queue order, each with
// publisher confirms and removed from the dead-letter queue only after the
// broker confirmed the copy. The copy has its failure record reset (error,
// class, attempts, failure times, RabbitMQ's x-death) so the consumer gives
// it a full set of attempts again, and its replay count ([dlq.HeaderReplays])
// raised by one.
//
// When ctx ends, Replay finishes the message in flight (up to
// opts.DrainTimeout) and stops; the messages not replayed stay where they
// were. At worst, when the broker or the connection fails between the
// confirm and the removal, a message is in both queues; it is never in
// neither. The error then wraps ctx's error, and the Result says how far
// the replay got.
//
// A partitioned consumer (consumer.Config.Partitions) has no queue of its
// own name: its events arrive through its partition exchange, Consumer()
// + ".partitions", which hashes each message's entity header to one of its
// partition queues. Without opts.To, a replay for such a consumer
// publishes to that exchange, so each event goes back to its entity's
// partition (after the events that arrived there meanwhile) and to no
// other consumer.
//
// When the target queue does not exist (nor, without opts.To, the
// partition exchange), the replay ends at the first matching message with
// an error wrapping [ErrNoQueue], leaving every message in the dead-letter
// queue.
func (q *Queue) Replay(ctx context.Context, opts ReplayOptions) (Result, error) {
	if err := opts.Filter.Validate(); err != nil {
		return Result{DryRun: opts.DryRun}, err
	}
	switch {
	case opts.To == q.name:
		return Result{DryRun: opts.DryRun}, fmt.Errorf("dlq: cannot replay %q into itself", q.name)
	case opts.Rate < 0 || math.IsNaN(opts.Rate):
		return Result{DryRun: opts.DryRun}, fmt.Errorf("dlq: replay rate %v is not a positive number of messages per second", opts.Rate)
	case opts.Limit < 0:
		return Result{DryRun: opts.DryRun}, errNegativeLimit
	}
	if opts.To != "" {
		if _, err := q.depth(ctx, opts.To); err != nil {
			return Result{DryRun: opts.DryRun}, fmt.Errorf("replay target: %w", err)
		}
	}
	var pub *amqpx.Publisher
	if !opts.DryRun {
		var err error
		if pub, err = amqpx.NewPublisher(ctx, q.conn, 1); err != nil {
			return Result{}, err
		}
		defer pub.Close()
	}
	target := destination{queue: cmp.Or(opts.To, q.consumer)}
	targetChecked := opts.To != ""
	pace := pacer{rate: opts.Rate}
	return q.drain(ctx, opts.Filter, opts.Limit, opts.DryRun, opts.Progress, opts.OnMatch, func(d *amqp.Delivery, m *Message, p *Progress) (string, error) {
		if !targetChecked {
			// Asked at the first match, so that replaying an empty
			// queue, or a filter nothing matches, does not fail.
			var err error
			if target, err = q.consumerDestination(ctx); err != nil {
				return "", fmt.Errorf("replay target of %s: %w", q.name, err)
			}
			targetChecked = true
		}
		if origin := m.Origin(); opts.To == "" && origin != "" && !q.isHome(origin) {
			p.ForeignOrigin++
		}
		if opts.DryRun {
			return target.String(), nil
		}
		if err := pace.wait(ctx); err != nil {
			return "", err
		}
		return target.String(), q.replayOne(ctx, pub, d, m, target, cmp.Or(opts.DrainTimeout, DefaultDrainTimeout))
	})
}

// destination is where a replay publishes: a queue, through the default
// exchange, or a partitioned consumer's partition exchange.
type destination struct{ queue, exchange string }

func (d destination) String() string { return cmp.Or(d.exchange, d.queue) }

// partitionExchange is the partition exchange of the partitioned consumer
// named consumer, as consumer.PartitionExchangeName names it (dlqtool
// cannot import consumer; the consumer's partition replay test pins the
// two together).
func partitionExchange(consumer string) string { return consumer + ".partitions" }

// isHome reports whether queue is where this DLQ's messages come from:
// the consumer's queue, or one of its partition queues (consumer.p<i>,
// as consumer.PartitionQueueName names them).
func (q *Queue) isHome(queue string) bool {
	if queue == q.consumer {
		return true
	}
	i, ok := strings.CutPrefix(queue, q.consumer+".p")
	if !ok || i == "" {
		return false
	}
	for _, r := range i {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// consumerDestination is where messages of this DLQ go back to: the
// consumer's queue, or when it has none, its partition exchange.
func (q *Queue) consumerDestination(ctx context.Context) (destination, error) {
	_, err := q.depth(ctx, q.consumer)
	if !errors.Is(err, ErrNoQueue) {
		return destination{queue: q.consumer}, err
	}
	ex := partitionExchange(q.consumer)
	if found, xerr := q.exchangeExists(ctx, ex); xerr != nil || !found {
		return destination{}, cmp.Or(xerr, err)
	}
	return destination{exchange: ex}, nil
}

// replayOne moves one message to target.
func (q *Queue) replayOne(ctx context.Context, pub *amqpx.Publisher, d *amqp.Delivery, m *Message, target destination, drain time.Duration) error {
	// The confirm wait outlives an interrupt (within drain), so Ctrl-C
	// mid-publish still ends with the original removed once the copy is
	// safe, rather than with the message in both queues.
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), drain)
	defer cancel()
	// Mandatory publishing (amqpx.Publisher) makes a copy no queue took a
	// failure: through a partition exchange too, the original stays.
	if err := pub.Publish(pctx, target.exchange, target.queue, replayPublishing(m, q.consumer, q.conn.Config.FrameSize)); err != nil {
		return fmt.Errorf("replay message %s to %q (it is still in %s): %w", describe(m), target, q.name, err)
	}
	// Only now that the broker has confirmed the copy in target may the
	// original go. Acking first would open a window in which a failed
	// publish or a crash loses the message.
	if err := d.Ack(false); err != nil {
		return fmt.Errorf("remove message %s from %s after replaying it to %q (it is now in both): %w", describe(m), q.name, target, err)
	}
	return nil
}

// PurgeOptions select the messages [Queue.Purge] deletes.
type PurgeOptions struct {
	Filter Filter
	// Limit is the most messages to delete. 0 means all that match.
	Limit int
	// DryRun selects and counts without deleting anything.
	DryRun   bool
	Progress func(Progress)
	// OnMatch is as in [ReplayOptions].
	OnMatch func(*Message)
	// Archive, if set, gets every message to delete, written as
	// [Queue.Export] writes it, and is synced before any is deleted (see
	// [Queue.Purge]). A dry run leaves it alone.
	Archive Archive
}

// Archive is where a purge keeps a copy of what it deletes: an *os.File,
// or anything else that can say when what was written is safe.
type Archive interface {
	io.Writer
	// Sync returns nil once everything written is on stable storage.
	Sync() error
}

// Purge deletes the matching messages from the dead-letter queue, leaving
// the others in place and in order. Deleting is what the caller asked for,
// so there is no copy to confirm first unless opts.Archive is set. When
// ctx ends Purge stops at once, and the Result says how many it deleted.
//
// With opts.Archive, Purge holds every matching message (unacknowledged,
// so the broker still owns it) while it writes it to the archive, then
// syncs the archive, and only then deletes them. When writing or syncing
// fails, or ctx ends first, it deletes nothing: every message goes back to
// its place. Holding them all costs memory, as a filtered read does.
func (q *Queue) Purge(ctx context.Context, opts PurgeOptions) (Result, error) {
	if err := opts.Filter.Validate(); err != nil {
		return Result{DryRun: opts.DryRun}, err
	}
	if opts.Limit < 0 {
		return Result{DryRun: opts.DryRun}, errNegativeLimit
	}
	if opts.Archive != nil && !opts.DryRun {
		return q.purgeArchived(ctx, opts)
	}
	return q.drain(ctx, opts.Filter, opts.Limit, opts.DryRun, opts.Progress, opts.OnMatch, func(d *amqp.Delivery, m *Message, _ *Progress) (string, error) {
		if opts.DryRun {
			return "", nil
		}
		if err := d.Ack(false); err != nil {
			return "", fmt.Errorf("delete message %s: %w", describe(m), err)
		}
		return "", nil
	})
}

// purgeArchived is Purge with an archive: write all, sync, then delete.
func (q *Queue) purgeArchived(ctx context.Context, opts PurgeOptions) (Result, error) {
	var res Result
	w := bufio.NewWriter(opts.Archive)
	var held []amqp.Delivery
	// commit deletes the held messages once the archive is safe. The order
	// is what keeps the data: a message deleted before its copy is synced
	// would be lost to a failed write, a full disk or a crash. Until the
	// acks, the broker still owns every message and puts it back when the
	// scan's channel closes.
	commit := func(err error) error {
		if err != nil {
			return err
		}
		if err := w.Flush(); err != nil {
			return fmt.Errorf("write the archive (nothing was purged): %w", err)
		}
		if err := opts.Archive.Sync(); err != nil {
			return fmt.Errorf("sync the archive to disk (nothing was purged): %w", err)
		}
		for i := range held {
			if err := held[i].Ack(false); err != nil {
				return fmt.Errorf("delete message #%d: %w", i, err)
			}
			res.Done++
		}
		return nil
	}
	sel := opts.Filter.selector(time.Now())
	err := q.scanThen(ctx, prefetchFor(opts.Filter, opts.Limit, false), &res.Progress, opts.Progress, func(d *amqp.Delivery, m *Message) (bool, error) {
		if !sel.take(m, &res.Progress) {
			return true, nil
		}
		if opts.OnMatch != nil {
			opts.OnMatch(m)
		}
		if err := ctx.Err(); err != nil {
			return false, err
		}
		line, err := m.MarshalJSON()
		if err != nil {
			return false, err
		}
		if _, err := w.Write(append(line, '\n')); err != nil {
			return false, fmt.Errorf("write the archive (nothing was purged): %w", err)
		}
		res.Matched++
		kept := *d
		kept.Body = nil // written; only the tag is needed to delete it
		held = append(held, kept)
		return opts.Limit <= 0 || res.Matched < opts.Limit, nil
	}, commit)
	return res, err
}

// drain runs act on each matching message, up to limit, and counts.
// act returns the queue the message went to, if any, and may count in the
// Progress it is given.
func (q *Queue) drain(ctx context.Context, f Filter, limit int, dryRun bool, progress func(Progress), onMatch func(*Message), act func(*amqp.Delivery, *Message, *Progress) (string, error)) (Result, error) {
	res := Result{DryRun: dryRun, Queues: map[string]int{}}
	sel := f.selector(time.Now())
	err := q.scan(ctx, prefetchFor(f, limit, !dryRun), &res.Progress, progress, func(d *amqp.Delivery, m *Message) (bool, error) {
		if !sel.take(m, &res.Progress) {
			return true, nil
		}
		if onMatch != nil {
			onMatch(m)
		}
		// The scan may still pick a buffered delivery over a cancelled
		// context; nothing is acted on once ctx has ended.
		if err := ctx.Err(); err != nil {
			return false, err
		}
		target, err := act(d, m, &res.Progress)
		if err != nil {
			return false, err
		}
		res.Matched++
		if !dryRun {
			res.Done++
		}
		if target != "" {
			res.Queues[target]++
		}
		return limit <= 0 || res.Matched < limit, nil
	})
	if len(res.Queues) == 0 {
		res.Queues = nil
	}
	return res, err
}

var errNegativeLimit = errors.New("dlq: limit must not be negative")

// describe names a message in errors: its event id, or its position.
func describe(m *Message) string {
	if m.EventID != "" {
		return fmt.Sprintf("%q", m.EventID)
	}
	return fmt.Sprintf("#%d", m.Position)
}

// pacer spaces out calls to wait so they happen at most rate times a
// second; a zero rate never waits.
type pacer struct {
	rate float64
	next time.Time
}

func (p *pacer) wait(ctx context.Context) error {
	if p.rate <= 0 {
		return ctx.Err()
	}
	now := time.Now()
	if p.next.After(now) {
		t := time.NewTimer(p.next.Sub(now))
		defer t.Stop()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		now = p.next
	}
	p.next = now.Add(time.Duration(float64(time.Second) / p.rate))
	return ctx.Err()
}
