package consumer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"runtime/debug"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/cloudevents"
	"github.com/warrenmq/warren/dlq"
	"github.com/warrenmq/warren/internal/amqpx"
	"github.com/warrenmq/warren/internal/redact"
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
	c.observe.Call("Received", func() { obs.Received(c.cfg.Name) })
	s := c.dispose(hctx, h, j)
	c.observe.Call("Settled", func() { obs.Settled(c.cfg.Name, s) })
}

// dispose decodes the delivery, runs the handler, decides what the ack
// policy does with it and does that, and says what became of the delivery.
func (c *BaseConsumer) dispose(hctx context.Context, h warren.Handler, j job) Settlement {
	return c.act(hctx, j, c.evaluate(hctx, h, j.d))
}

// decision is what the ack policy decides for one delivery, before anything is
// done about it. The worker carries it out (act); package consumertest
// reports it, so that what a test sees is what the consumer does.
type decision struct {
	// Settlement as decided: act turns a move whose publish failed into
	// Requeued, without Class or Unavailable.
	Settlement
	queue   string        // where a Retried, Deferred or DeadLettered copy goes
	delay   time.Duration // the retry tier's delay, for Retried and Deferred
	headers amqp.Table    // the copy's headers: stamped, without broker death headers
	attempt int           // the attempt that was handled (1 for the first delivery)
	err     error         // why the message failed; nil when acked or deferred without one
	// eventID and eventType name the event in log lines: the decoded
	// event's, or what an undecodable body says (Settlement.EventType, for
	// observers, stays empty then).
	eventID, eventType string
	unrouted           bool // no handler's prefix matched: skipped without the chain
}

// evaluate decodes a delivery, runs it through the handler chain h and
// decides what the ack policy does with it, doing none of it.
func (c *BaseConsumer) evaluate(hctx context.Context, h warren.Handler, d amqp.Delivery) decision {
	return c.evaluateIn(hctx, h, d, c.topo.Queue, 0)
}

// evaluateIn is evaluate for a delivery from queue (the consumer's queue,
// or one of its partition queues) that has already failed spent times in
// place (a partition retries without leaving its queue).
func (c *BaseConsumer) evaluateIn(hctx context.Context, h warren.Handler, d amqp.Delivery, queue string, spent int) decision {
	d = withTrustedHistory(d, c.topo.PartitionExchange)
	m, err := c.decode(d, queue)
	m.Attempt += spent
	if err != nil {
		v := c.deadLetterDecision(d, queue, m.Attempt, dlq.ClassUndecodable, redact.Error(err), time.Now())
		if len(d.Body) <= c.cfg.MaxBodyBytes {
			// A Plane message has no message_id or type property to be
			// named by: what its body says names it in the log, as the
			// DLQ tools name it (a missing event_id leaves its type).
			// A CloudEvent's binary body holds no event_id: its
			// message_id, which warren's relays set, names it.
			id, typ := dlq.BodyEvent(d.Body)
			v.eventID, v.eventType = cmp.Or(id, d.MessageId), cmp.Or(typ, d.Type)
		}
		return v
	}
	ctx, endSpan := c.traceHandler(hctx, d, m)
	var start time.Time
	if c.cfg.Observer != nil {
		start = time.Now()
	}
	// An event no handler takes, under AckUnhandled, is skipped without
	// the middleware chain: a skip needs no dedup claim (which would leave
	// a key for the store's retention per such event) and no filter.
	unrouted := c.cfg.Unhandled == AckUnhandled && c.router.match(m.Event.Type) == nil
	if unrouted {
		err = c.router.Handle(ctx, m)
	} else {
		err = c.invoke(ctx, h, m)
	}
	var took time.Duration
	if !start.IsZero() {
		took = time.Since(start)
	}
	outcome, delay := warren.Classify(err)
	endSpan(outcome, err) // the span redacts its own copy, keeping the error's type
	// From here the handler's error becomes text that leaves the process
	// (the x-warren-error header, log lines): a webhook's error may quote
	// its endpoint's URL with a password or ?token=, and nobody who reads
	// the DLQ should see them.
	err = redact.Error(err)
	v := c.decide(d, queue, m.Attempt, outcome, delay, err, hctx.Err() != nil, time.Now())
	v.EventType, v.eventID, v.eventType, v.HandlerDuration = m.Event.Type, m.Event.ID, m.Event.Type, took
	v.EventCreatedAt = m.Event.CreatedAt
	v.unrouted = unrouted
	return v
}

// withTrustedHistory returns d with the failure history its headers claim
// (warren's dead-letter metadata, RabbitMQ's death headers; see
// [dlq.StripHistory]) removed, unless d came through the default exchange
// or the consumer's partition exchange, the only routes warren's own copies
// (retries, replays) take and which a producer has no permission to use.
// Everything after it starts from what it returns. Why, route by route:
// docs/adr/026-trusted-history.md.
func withTrustedHistory(d amqp.Delivery, partitions string) amqp.Delivery {
	if d.Exchange != "" && (partitions == "" || d.Exchange != partitions) {
		d.Headers = dlq.StripHistory(d.Headers)
	}
	return d
}

// decide is the ack policy for a decoded delivery from queue whose handler
// returned err (classified as outcome with the hint delay) on the given
// attempt; stopping says the handler's context had ended. It only
// computes. A partitioned consumer retries and defers in place: the
// decision names no queue, only how long the partition waits.
func (c *BaseConsumer) decide(d amqp.Delivery, queue string, attempt int, outcome warren.Outcome, delay time.Duration, err error, stopping bool, now time.Time) decision {
	if stopping && outcome != warren.OutcomeDone && outcome != warren.OutcomeSkipped && outcome != warren.OutcomeDuplicate {
		// The shutdown grace ran out under this handler. Its failure is
		// ours, not the message's: put it back as it was.
		return decision{Settlement: Settlement{Disposition: Requeued}, attempt: attempt, err: err}
	}
	switch outcome {
	case warren.OutcomeSkipped:
		return decision{Settlement: Settlement{Disposition: Skipped}, attempt: attempt, err: err}
	case warren.OutcomeDuplicate:
		return decision{Settlement: Settlement{Disposition: Duplicate}, attempt: attempt, err: err}
	case warren.OutcomeDeferred:
		// Not a failure: the attempt is not spent and no error recorded.
		if c.topo.Partitioned() {
			return decision{Settlement: Settlement{Disposition: Deferred, Unavailable: errors.Is(err, warren.ErrUnavailable)},
				delay: partitionRetryDelay(c.cfg.RetryDelays, 1, delay), attempt: attempt, err: err}
		}
		tier := c.topo.tierFor(1, delay)
		return decision{
			// A store outage defers every message until it ends, however
			// long: counted apart so that it shows.
			Settlement: Settlement{Disposition: Deferred, Unavailable: errors.Is(err, warren.ErrUnavailable)},
			queue:      tier.Queue, delay: tier.Delay,
			headers: dlq.StripDeaths(d.Headers, queue),
			attempt: attempt, err: err,
		}
	case warren.OutcomeRetry:
		if attempt >= c.cfg.MaxAttempts {
			return c.deadLetterDecision(d, queue, attempt, dlq.ClassExhausted, err, now)
		}
		if c.topo.Partitioned() {
			return decision{Settlement: Settlement{Disposition: Retried},
				delay: partitionRetryDelay(c.cfg.RetryDelays, attempt, delay), attempt: attempt, err: err}
		}
		tier := c.topo.tierFor(attempt, delay)
		return decision{
			Settlement: Settlement{Disposition: Retried},
			queue:      tier.Queue, delay: tier.Delay,
			headers: dlq.StripDeaths(dlq.Stamp(d.Headers, c.failure(d, queue, err, now), attempt, ""), queue),
			attempt: attempt, err: err,
		}
	case warren.OutcomePermanent:
		class := dlq.ClassPermanent
		if _, ok := errors.AsType[*UnhandledError](err); ok {
			class = dlq.ClassUnhandled
		}
		if errors.Is(err, warren.ErrUndecodable) {
			class = dlq.ClassUndecodable
		}
		return c.deadLetterDecision(d, queue, attempt, class, err, now)
	}
	return decision{Settlement: Settlement{Disposition: Done}, attempt: attempt}
}

// deadLetterDecision sends a message to the DLQ with metadata saying why.
func (c *BaseConsumer) deadLetterDecision(d amqp.Delivery, queue string, attempt int, class dlq.Class, err error, now time.Time) decision {
	return decision{
		Settlement: Settlement{Disposition: DeadLettered, Class: class},
		queue:      c.topo.DLQ,
		headers:    dlq.StripDeaths(dlq.Stamp(d.Headers, c.failure(d, queue, err, now), attempt, class), queue),
		attempt:    attempt, err: err,
	}
}

// act carries out v on the delivery of j: acks, nacks or moves it.
func (c *BaseConsumer) act(hctx context.Context, j job, v decision) Settlement {
	if v.unrouted {
		c.noteUnrouted(hctx, v.eventType)
	}
	s := v.Settlement
	switch v.Disposition {
	case Done, Skipped, Duplicate:
		c.ack(j, v.Disposition)
	case Requeued:
		c.stats.requeued.Add(1)
		j.acker.settle(ackVerdict{tag: j.d.DeliveryTag, ack: false})
	case Retried:
		s.Disposition = c.republish(hctx, j, v, movedRetry,
			slog.Duration("delay", v.delay), slog.Int("attempt", v.attempt), slog.Any("error", v.err))
	case Deferred:
		s.Disposition = c.republish(hctx, j, v, movedDeferred, slog.Duration("delay", v.delay))
		if s.Disposition == Deferred && s.Unavailable {
			c.stats.unavailable.Add(1)
		}
	case DeadLettered:
		s.Disposition = c.republish(hctx, j, v, movedDead,
			slog.String("class", string(v.Class)), slog.Int("attempt", v.attempt), slog.Any("error", v.err))
	}
	if s.Disposition == Requeued {
		// Nothing was moved: the message is back in the queue as it was.
		s.Class, s.Unavailable = "", false
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

// invoke calls the handler, turning a panic into a transient error: one
// bad message must not take the process down. The stack goes to the log
// only: the error becomes the x-warren-error header, which anyone reading
// the DLQ sees, and the stack's source paths are not theirs to read.
func (c *BaseConsumer) invoke(ctx context.Context, h warren.Handler, m *warren.Message) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("handler panicked: %v", r)
			c.log.ErrorContext(ctx, "handler panicked", "event_id", m.Event.ID, "event_type", m.Event.Type,
				"panic", fmt.Sprint(r), "stack", string(debug.Stack()))
		}
	}()
	return h.Handle(ctx, m)
}

// decode checks a delivery from queue and turns it into a Message. On
// error it still returns what it could read (the attempt count), for the
// dead letter.
func (c *BaseConsumer) decode(d amqp.Delivery, queue string) (*warren.Message, error) {
	attempts := 0
	if _, ok := d.Headers[dlq.HeaderAttempts]; ok { // only a retry's copy, not a producer's message, has it
		attempts = dlq.ParseMetadata(d.Headers).Attempts
	}
	m := &warren.Message{
		Body:        d.Body,
		Headers:     d.Headers,
		Attempt:     attempts + 1,
		MaxAttempts: c.cfg.MaxAttempts,
		Consumer:    c.cfg.Name,
		Queue:       queue,
		Redelivered: d.Redelivered,
		ReceivedAt:  time.Now(),
	}
	if why, ok := d.Headers[dlq.HeaderUnreadable]; ok {
		// The connection replaced headers amqp091-go could not read, or
		// that no retry or dead letter could carry (see
		// dlq.HeaderUnreadable): what they said is lost to warren, so the
		// message goes to the DLQ rather than to a handler.
		return m, fmt.Errorf("headers refused: %v", why)
	}
	if len(d.Body) > c.cfg.MaxBodyBytes {
		return m, fmt.Errorf("body is %d bytes, over the %d-byte limit", len(d.Body), c.cfg.MaxBodyBytes)
	}
	if !plainEncoding(d.ContentEncoding) {
		return m, fmt.Errorf("content encoding %q is not supported: the body must be plain UTF-8 JSON (no compression)", d.ContentEncoding)
	}
	if cloudevents.IsCloudEvent(d.ContentType, d.Headers) {
		// A relay with CloudEvents set, or another CloudEvents producer:
		// the event is in the headers and the body (binary mode), or in
		// the body's event format (structured). Neither warren's nor
		// Plane's envelope looks like one.
		ce, err := cloudevents.Decode(d.ContentType, d.Headers, d.Body)
		if err != nil {
			return m, err
		}
		m.Event = ce.Event
		return m, nil
	}
	if d.ContentType != "" && d.ContentType != "application/json" { // what warren and Plane send needs no parsing
		if mt, _, err := mime.ParseMediaType(d.ContentType); err != nil || mt != "application/json" {
			return m, fmt.Errorf("content type %q is not application/json", d.ContentType)
		}
	}
	ev, err := warren.DecodeEvent(d.Body)
	if err != nil {
		return m, err
	}
	m.Event = ev
	return m, nil
}

// plainEncoding reports whether a content_encoding property leaves the
// body as it is. AMQP's content-encoding is MIME's (gzip, deflate, …),
// which the consumer does not undo: such a body is refused. But pika users
// put the body's charset there, and Plane's publisher sets "utf-8" on every
// message (apps/api/plane/event_stream/publisher.py): that names no
// transformation, and refusing it would dead-letter all of Plane's events.
// UTF-8 is the only charset JSON allows, and the decoder checks the body is
// UTF-8, so "utf-8" is identity; another charset (utf-16, latin1) is not.
func plainEncoding(enc string) bool {
	switch strings.ToLower(enc) {
	case "", "identity", "utf-8", "utf8":
		return true
	}
	return false
}

func (c *BaseConsumer) failure(d amqp.Delivery, queue string, err error, at time.Time) dlq.Failure {
	var contract, field string
	if ff, ok := errors.AsType[warren.FieldFailure](err); ok {
		// Masked as the error's text is: a path names a map's keys,
		// which are the producer's data ("limits.password=…").
		contract, field = ff.FailedField()
		contract, field = redact.Secrets(contract), redact.Secrets(field)
	}
	return dlq.Failure{
		Err:        err.Error(),
		Contract:   contract,
		Field:      field,
		At:         at,
		Queue:      queue,
		Exchange:   d.Exchange,
		RoutingKey: d.RoutingKey,
		Consumer:   c.cfg.Name,
		Host:       c.host,
	}
}

// republish sends a copy of the delivery to v's queue with v's headers
// (through the default exchange, so it reaches that queue and no other) and acks the original
// only after the broker has confirmed the copy. Acking first would lose the
// message whenever the publish then failed; this order can at worst leave
// it in both queues, and the handler's idempotency absorbs that. It
// returns Requeued when the publish failed, else kind's disposition.
func (c *BaseConsumer) republish(hctx context.Context, j job, v decision, kind move, attrs ...slog.Attr) Disposition {
	d, queue := j.d, v.queue
	if err := c.publishCopy(j.s, queue, copyOf(d, v, j.s.conn.Config.FrameSize)); err != nil {
		c.stats.publishFailures.Add(1)
		c.log.LogAttrs(hctx, slog.LevelError, "could not move the message; requeueing it",
			append(eventAttrs(d, v), slog.String("to", queue), slog.Any("error", err))...)
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
		append(append(eventAttrs(d, v), slog.String("to", queue)), attrs...)...)
	j.acker.settle(ackVerdict{tag: d.DeliveryTag, ack: true})
	return kind.disposition()
}

// copyOf is the copy of d that v moves to its queue, on a connection of
// the given frame_max.
func copyOf(d amqp.Delivery, v decision, frameMax int) amqp.Publishing {
	return amqp.Publishing{
		// Without the broker's death headers (decide strips them): with
		// an x-death that names our queue (a dead message moved back
		// here), the retry tier's dead-letter back to the queue would be
		// a cycle, and RabbitMQ would drop the copy after we acked the
		// original. And without the producer's entries when, with our
		// record and the broker's x-death added, they would come back over
		// what the client reads (dlq.Fit): the copy's record and the
		// event are kept, and it is handled or read like any other.
		Headers:         dlq.Fit(v.headers, frameMax),
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
}

// eventAttrs names the event of a move in its log line: by the AMQP
// message_id and type, or else by the body's event_id and event_type
// (Plane's services publish with neither property), so that the operator
// can look the event up (warren dlq show --id, --type) from the log.
func eventAttrs(d amqp.Delivery, v decision) []slog.Attr {
	return []slog.Attr{slog.String("event_id", cmp.Or(d.MessageId, v.eventID)), slog.String("event_type", cmp.Or(d.Type, v.eventType))}
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
