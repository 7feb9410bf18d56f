package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"runtime/debug"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/dlq"
	"github.com/warrenmq/warren/internal/amqpx"
)

// process runs one delivery through the handler and applies the ack policy:
//
//	done, skipped, duplicate         → ack
//	transient failure, panic         → retry tier (attempt+1), confirm, then ack
//	deferred                         → retry tier (same attempt), confirm, then ack
//	permanent, exhausted, undecodable → DLQ with metadata, confirm, then ack
//	failure after forced shutdown    → nack with requeue, no attempt counted
func (c *BaseConsumer) process(hctx context.Context, h warren.Handler, j job) {
	if j.s.dead.Load() {
		// Its channel is gone, so it can never be acked: running the
		// handler would only do work the broker is about to redeliver.
		return
	}
	c.stats.received.Add(1)
	c.stats.inFlight.Add(1)
	defer func() {
		c.stats.lastSettled.Store(time.Now().UnixNano())
		c.stats.inFlight.Add(-1)
	}()
	c.stats.lastMessage.Store(time.Now().UnixNano())
	obs := c.cfg.Observer
	if obs == nil {
		c.dispose(hctx, h, j)
		return
	}
	obs.Received(c.cfg.Name)
	obs.Settled(c.cfg.Name, c.dispose(hctx, h, j))
}

// dispose decodes the delivery, runs the handler and applies the ack
// policy, and says what became of the delivery.
func (c *BaseConsumer) dispose(hctx context.Context, h warren.Handler, j job) Settlement {
	m, err := c.decode(j.d)
	if err != nil {
		return c.deadLetter(hctx, j, m, dlq.ClassUndecodable, err)
	}
	ctx, endSpan := c.traceHandler(hctx, j.d, m)
	var start time.Time
	if c.cfg.Observer != nil {
		start = time.Now()
	}
	err = c.invoke(ctx, h, m)
	s := Settlement{EventType: m.Event.Type}
	if !start.IsZero() {
		s.HandlerDuration = time.Since(start)
	}
	outcome, delay := warren.Classify(err)
	endSpan(outcome, err)

	if hctx.Err() != nil && outcome != warren.OutcomeDone && outcome != warren.OutcomeSkipped && outcome != warren.OutcomeDuplicate {
		// The shutdown grace ran out under this handler. Its failure is
		// ours, not the message's: put it back as it was.
		c.stats.requeued.Add(1)
		j.acker.settle(ackVerdict{tag: j.d.DeliveryTag, ack: false})
		s.Disposition = Requeued
		return s
	}
	switch outcome {
	case warren.OutcomeDone:
		s.Disposition = c.ack(j, Done)
	case warren.OutcomeSkipped:
		s.Disposition = c.ack(j, Skipped)
	case warren.OutcomeDuplicate:
		s.Disposition = c.ack(j, Duplicate)
	case warren.OutcomeDeferred:
		// Not a failure: the attempt is not spent and no error recorded.
		tier := c.topo.tierFor(1, delay)
		s.Disposition = c.republish(hctx, j, tier.Queue, j.d.Headers, movedDeferred, slog.Duration("delay", tier.Delay))
		if s.Disposition == Deferred && errors.Is(err, warren.ErrUnavailable) {
			// A store outage defers every message until it ends, however
			// long: counted apart so that it shows.
			c.stats.unavailable.Add(1)
			s.Unavailable = true
		}
	case warren.OutcomeRetry:
		if m.Attempt >= c.cfg.MaxAttempts {
			dead := c.deadLetter(hctx, j, m, dlq.ClassExhausted, err)
			dead.EventType, dead.HandlerDuration = s.EventType, s.HandlerDuration
			return dead
		}
		tier := c.topo.tierFor(m.Attempt, delay)
		headers := dlq.Stamp(j.d.Headers, c.failure(j.d, err), m.Attempt, "")
		s.Disposition = c.republish(hctx, j, tier.Queue, headers, movedRetry,
			slog.Duration("delay", tier.Delay), slog.Int("attempt", m.Attempt), slog.Any("error", err))
	case warren.OutcomePermanent:
		class := dlq.ClassPermanent
		if _, ok := errors.AsType[*UnhandledError](err); ok {
			class = dlq.ClassUnhandled
		}
		dead := c.deadLetter(hctx, j, m, class, err)
		dead.EventType, dead.HandlerDuration = s.EventType, s.HandlerDuration
		return dead
	}
	return s
}

func (c *BaseConsumer) ack(j job, d Disposition) Disposition {
	switch d {
	case Done:
		c.stats.done.Add(1)
	case Skipped:
		c.stats.skipped.Add(1)
	case Duplicate:
		c.stats.duplicates.Add(1)
	}
	j.acker.settle(ackVerdict{tag: j.d.DeliveryTag, ack: true})
	return d
}

// invoke calls the handler, turning a panic into a transient error that
// carries the stack: one bad message must not take the process down.
func (c *BaseConsumer) invoke(ctx context.Context, h warren.Handler, m *warren.Message) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("handler panicked: %v\n%s", r, debug.Stack())
		}
	}()
	return h.Handle(ctx, m)
}

// decode checks a delivery and turns it into a Message. On error it still
// returns what it could read (the attempt count), for the dead letter.
func (c *BaseConsumer) decode(d amqp.Delivery) (*warren.Message, error) {
	meta := dlq.ParseMetadata(d.Headers)
	m := &warren.Message{
		Body:        d.Body,
		Headers:     d.Headers,
		Attempt:     meta.Attempts + 1,
		MaxAttempts: c.cfg.MaxAttempts,
		Consumer:    c.cfg.Name,
		Queue:       c.topo.Queue,
		Redelivered: d.Redelivered,
		ReceivedAt:  time.Now(),
	}
	if len(d.Body) > c.cfg.MaxBodyBytes {
		return m, fmt.Errorf("body is %d bytes, over the %d-byte limit", len(d.Body), c.cfg.MaxBodyBytes)
	}
	if d.ContentType != "" {
		if mt, _, err := mime.ParseMediaType(d.ContentType); err != nil || mt != "application/json" {
			return m, fmt.Errorf("content type %q is not application/json", d.ContentType)
		}
	}
	if d.ContentEncoding != "" && d.ContentEncoding != "identity" {
		return m, fmt.Errorf("content encoding %q is not supported", d.ContentEncoding)
	}
	ev, err := warren.DecodeEvent(d.Body)
	if err != nil {
		return m, err
	}
	m.Event = ev
	return m, nil
}

func (c *BaseConsumer) failure(d amqp.Delivery, err error) dlq.Failure {
	return dlq.Failure{
		Err:        err.Error(),
		At:         time.Now(),
		Queue:      c.topo.Queue,
		Exchange:   d.Exchange,
		RoutingKey: d.RoutingKey,
		Consumer:   c.cfg.Name,
		Host:       c.host,
	}
}

// deadLetter moves a message to the DLQ with metadata saying why.
func (c *BaseConsumer) deadLetter(ctx context.Context, j job, m *warren.Message, class dlq.Class, err error) Settlement {
	headers := dlq.Stamp(j.d.Headers, c.failure(j.d, err), m.Attempt, class)
	s := Settlement{Disposition: c.republish(ctx, j, c.topo.DLQ, headers, movedDead,
		slog.String("class", string(class)), slog.Int("attempt", m.Attempt), slog.Any("error", err))}
	if s.Disposition == DeadLettered {
		s.Class = class
	}
	return s
}

// republish sends a copy of the delivery to queue (through the default
// exchange, so it reaches that queue and no other) and acks the original
// only after the broker has confirmed the copy. Acking first would lose the
// message whenever the publish then failed; this order can at worst leave
// it in both queues, and the handler's idempotency absorbs that. It
// returns Requeued when the publish failed, else kind's disposition.
func (c *BaseConsumer) republish(hctx context.Context, j job, queue string, headers amqp.Table, kind move, attrs ...slog.Attr) Disposition {
	d := j.d
	msg := amqp.Publishing{
		// Without the broker's death headers: with an x-death that names
		// our queue (a dead message moved back here), the retry tier's
		// dead-letter back to the queue would be a cycle, and RabbitMQ
		// would drop the copy after we acked the original.
		Headers:         dlq.StripDeaths(headers, c.topo.Queue),
		ContentType:     d.ContentType,
		ContentEncoding: d.ContentEncoding,
		// A message we hold on a producer's behalf must survive a broker
		// restart, whatever mode it arrived in.
		DeliveryMode:  amqp.Persistent,
		Priority:      d.Priority,
		CorrelationId: d.CorrelationId,
		ReplyTo:       d.ReplyTo,
		MessageId:     d.MessageId,
		Timestamp:     d.Timestamp,
		Type:          d.Type,
		AppId:         d.AppId,
		Body:          d.Body,
		// Expiration is dropped: the retry tier decides when a message
		// comes back, and a dead message must not expire before the DLQ's
		// own TTL. UserId is dropped: the broker refuses a user id other
		// than the publishing connection's.
	}
	if err := c.publishCopy(j.s, queue, msg); err != nil {
		c.stats.publishFailures.Add(1)
		c.log.Error("could not move the message; requeueing it", "to", queue, "message_id", d.MessageId, "error", err)
		if errors.Is(err, amqpx.ErrUnroutable) || errors.Is(err, amqpx.ErrNacked) {
			// The broker is refusing, not gone: wait a moment so a
			// missing queue does not become a hot redelivery loop.
			select {
			case <-time.After(time.Second):
			case <-hctx.Done():
			}
		}
		c.stats.requeued.Add(1)
		j.acker.settle(ackVerdict{tag: d.DeliveryTag, ack: false})
		return Requeued
	}
	c.stats.moved(kind).Add(1)
	c.log.LogAttrs(hctx, kind.level(), kind.String(),
		append([]slog.Attr{slog.String("message_id", d.MessageId), slog.String("event_type", d.Type), slog.String("to", queue)}, attrs...)...)
	j.acker.settle(ackVerdict{tag: d.DeliveryTag, ack: true})
	return kind.disposition()
}

// move is where republish sends a message.
type move uint8

const (
	movedRetry move = iota
	movedDeferred
	movedDead
)

func (k move) disposition() Disposition {
	return [...]Disposition{Retried, Deferred, DeadLettered}[k]
}

func (k move) String() string {
	return [...]string{"retry scheduled", "deferred", "dead-lettered"}[k]
}

// level logs dead letters as warnings (someone should look) and retries and
// deferrals at debug (the Logging middleware reports them).
func (k move) level() slog.Level {
	if k == movedDead {
		return slog.LevelWarn
	}
	return slog.LevelDebug
}
