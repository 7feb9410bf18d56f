package dlqtool

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
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
// When the target queue does not exist, the replay ends at the first
// matching message with an error wrapping [ErrNoQueue], leaving every
// message in the dead-letter queue.
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
	target := cmp.Or(opts.To, q.consumer)
	targetChecked := opts.To != ""
	pace := pacer{rate: opts.Rate}
	return q.drain(ctx, opts.Filter, opts.Limit, opts.DryRun, opts.Progress, func(d *amqp.Delivery, m *Message, p *Progress) (string, error) {
		if !targetChecked {
			// Asked at the first match, so that replaying an empty
			// queue, or a filter nothing matches, does not fail.
			if _, err := q.depth(ctx, target); err != nil {
				return "", fmt.Errorf("replay target of %s: %w", q.name, err)
			}
			targetChecked = true
		}
		if origin := m.Origin(); opts.To == "" && origin != "" && origin != q.consumer {
			p.ForeignOrigin++
		}
		if opts.DryRun {
			return target, nil
		}
		if err := pace.wait(ctx); err != nil {
			return "", err
		}
		return target, q.replayOne(ctx, pub, d, m, target, cmp.Or(opts.DrainTimeout, DefaultDrainTimeout))
	})
}

// replayOne moves one message to target.
func (q *Queue) replayOne(ctx context.Context, pub *amqpx.Publisher, d *amqp.Delivery, m *Message, target string, drain time.Duration) error {
	// The confirm wait outlives an interrupt (within drain), so Ctrl-C
	// mid-publish still ends with the original removed once the copy is
	// safe, rather than with the message in both queues.
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), drain)
	defer cancel()
	if err := pub.Publish(pctx, "", target, replayPublishing(m, q.consumer)); err != nil {
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
}

// Purge deletes the matching messages from the dead-letter queue, leaving
// the others in place and in order. Deleting is what the caller asked for,
// so there is no copy to confirm first; [Queue.Export] them beforehand to
// keep one. When ctx ends Purge stops at once, and the Result says how many
// it deleted.
func (q *Queue) Purge(ctx context.Context, opts PurgeOptions) (Result, error) {
	if err := opts.Filter.Validate(); err != nil {
		return Result{DryRun: opts.DryRun}, err
	}
	if opts.Limit < 0 {
		return Result{DryRun: opts.DryRun}, errNegativeLimit
	}
	return q.drain(ctx, opts.Filter, opts.Limit, opts.DryRun, opts.Progress, func(d *amqp.Delivery, m *Message, _ *Progress) (string, error) {
		if opts.DryRun {
			return "", nil
		}
		if err := d.Ack(false); err != nil {
			return "", fmt.Errorf("delete message %s: %w", describe(m), err)
		}
		return "", nil
	})
}

// drain runs act on each matching message, up to limit, and counts.
// act returns the queue the message went to, if any, and may count in the
// Progress it is given.
func (q *Queue) drain(ctx context.Context, f Filter, limit int, dryRun bool, progress func(Progress), act func(*amqp.Delivery, *Message, *Progress) (string, error)) (Result, error) {
	res := Result{DryRun: dryRun, Queues: map[string]int{}}
	now := time.Now()
	err := q.scan(ctx, prefetchFor(f, limit, !dryRun), &res.Progress, progress, func(d *amqp.Delivery, m *Message) (bool, error) {
		if !f.Match(m, now) {
			return true, nil
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
