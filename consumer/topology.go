package consumer

import (
	"errors"
	"fmt"
	"regexp"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/dlq"
)

// Topology is the set of names a consumer declares. Its methods are how the
// consumer, the DLQ tooling and tests agree on names.
type Topology struct {
	Exchange string // the fanout exchange events arrive on
	Queue    string // the consumer's queue
	DLX      string // where the broker sends messages that expire in Queue
	DLQ      string // dead messages
	Retry    []RetryTier
}

// RetryTier is one retry queue: messages wait Delay in it, then the broker
// dead-letters them back to the consumer's queue.
type RetryTier struct {
	Delay time.Duration
	Queue string
}

// TopologyFor returns the names a consumer with cfg declares.
func TopologyFor(cfg Config) Topology {
	cfg = cfg.withDefaults()
	t := Topology{
		Exchange: cfg.Exchange,
		Queue:    cfg.Name,
		DLX:      dlq.ExchangeName(cfg.Name),
		DLQ:      dlq.QueueName(cfg.Name),
	}
	for _, d := range cfg.RetryDelays {
		t.Retry = append(t.Retry, RetryTier{Delay: d, Queue: cfg.Name + ".retry." + shortDuration(d)})
	}
	return t
}

// Queues lists every queue of the topology.
func (t Topology) Queues() []string {
	qs := []string{t.Queue, t.DLQ}
	for _, r := range t.Retry {
		qs = append(qs, r.Queue)
	}
	return qs
}

// shortDuration names a delay the way an operator writes it: 1s, 10m, 1h,
// 1500ms.
func shortDuration(d time.Duration) string {
	for _, u := range []struct {
		unit time.Duration
		name string
	}{{time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}} {
		if d%u.unit == 0 {
			return fmt.Sprintf("%d%s", d/u.unit, u.name)
		}
	}
	return fmt.Sprintf("%dms", d/time.Millisecond)
}

// tierFor picks the retry tier for a failure: the hint's smallest tier at
// least as long, or without a hint the tier of the attempt that failed.
func (t Topology) tierFor(attempt int, hint time.Duration) RetryTier {
	if hint > 0 {
		for _, r := range t.Retry {
			if r.Delay >= hint {
				return r
			}
		}
		return t.Retry[len(t.Retry)-1]
	}
	i := max(attempt-1, 0)
	return t.Retry[min(i, len(t.Retry)-1)]
}

// TopologyError reports a declaration the broker refused. When an existing
// queue or exchange was declared with different arguments, Argument names
// the one that differs.
type TopologyError struct {
	Kind     string // "queue", "exchange" or "binding"
	Name     string
	Argument string // e.g. "x-message-ttl"; empty when the cause is not a mismatch
	Err      error
}

func (e *TopologyError) Error() string {
	if e.Argument != "" {
		return fmt.Sprintf("declare %s %q: it exists with a different %s; delete it or change the config to match (%v)", e.Kind, e.Name, e.Argument, e.Err)
	}
	return fmt.Sprintf("declare %s %q: %v", e.Kind, e.Name, e.Err)
}

func (e *TopologyError) Unwrap() error { return e.Err }

var inequivalentArg = regexp.MustCompile(`inequivalent arg '([^']+)'`)

func topologyError(kind, name string, err error) error {
	te := &TopologyError{Kind: kind, Name: name, Err: err}
	var ae *amqp.Error
	if errors.As(err, &ae) && ae.Code == amqp.PreconditionFailed {
		if m := inequivalentArg.FindStringSubmatch(ae.Reason); m != nil {
			te.Argument = m[1]
		}
	}
	return te
}

// fatal reports whether a declaration error is one reconnecting cannot fix:
// a mismatch with existing queues, or missing permissions.
func (e *TopologyError) fatal() bool {
	var ae *amqp.Error
	return errors.As(e.Err, &ae) && (ae.Code == amqp.PreconditionFailed || ae.Code == amqp.AccessRefused)
}

// declare creates the exchange, queue, dead-letter and retry topology.
// Declaring what already exists with the same arguments changes nothing.
func (t Topology) declare(ch *amqp.Channel, cfg Config) error {
	queueArgs := func(ttl time.Duration, extra amqp.Table) amqp.Table {
		args := amqp.Table{}
		if ttl > 0 {
			args["x-message-ttl"] = ttl.Milliseconds()
		}
		if cfg.QueueType == Quorum {
			args["x-queue-type"] = string(Quorum)
		}
		for k, v := range extra {
			args[k] = v
		}
		return args
	}
	// Quorum queues dead-letter at most once unless asked; at-least-once
	// needs reject-publish overflow. Both matter here: retry queues deliver
	// by dead-lettering, and expiry must not drop a message on its way to
	// the DLQ.
	deadLetterTo := func(exchange, routingKey string) amqp.Table {
		args := amqp.Table{"x-dead-letter-exchange": exchange}
		if routingKey != "" {
			args["x-dead-letter-routing-key"] = routingKey
		}
		if cfg.QueueType == Quorum {
			args["x-dead-letter-strategy"] = "at-least-once"
			args["x-overflow"] = "reject-publish"
		}
		return args
	}

	if err := ch.ExchangeDeclare(t.Exchange, amqp.ExchangeFanout, true, false, false, false, nil); err != nil {
		return topologyError("exchange", t.Exchange, err)
	}
	if err := ch.ExchangeDeclare(t.DLX, amqp.ExchangeFanout, true, false, false, false, nil); err != nil {
		return topologyError("exchange", t.DLX, err)
	}
	mainQueueArgs := deadLetterTo(t.DLX, "")
	if cfg.DeliveryLimit > 0 {
		mainQueueArgs["x-delivery-limit"] = int64(cfg.DeliveryLimit)
	}
	queues := []struct {
		name string
		args amqp.Table
	}{
		{t.DLQ, queueArgs(cfg.DLQTTL, nil)},
		{t.Queue, queueArgs(cfg.MessageTTL, mainQueueArgs)},
	}
	// Retry tiers dead-letter through the default exchange straight to this
	// consumer's queue: a retry must never go back through the fanout
	// exchange, where every other consumer would see it again.
	for _, r := range t.Retry {
		queues = append(queues, struct {
			name string
			args amqp.Table
		}{r.Queue, queueArgs(r.Delay, deadLetterTo("", t.Queue))})
	}
	for _, q := range queues {
		if _, err := ch.QueueDeclare(q.name, true, false, false, false, q.args); err != nil {
			return topologyError("queue", q.name, err)
		}
	}
	if err := ch.QueueBind(t.DLQ, "", t.DLX, false, nil); err != nil {
		return topologyError("binding", t.DLQ+" to "+t.DLX, err)
	}
	if err := ch.QueueBind(t.Queue, "", t.Exchange, false, nil); err != nil {
		return topologyError("binding", t.Queue+" to "+t.Exchange, err)
	}
	return nil
}
