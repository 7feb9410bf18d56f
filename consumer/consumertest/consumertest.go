package consumertest

import (
	"context"
	"encoding/json"
	"maps"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/consumer"
	"github.com/warrenmq/warren/consumer/internal/kitlink"
	"github.com/warrenmq/warren/dlq"
	"github.com/warrenmq/warren/internal/amqpx"
)

// Delivery is one message as the broker would hand it to a consumer.
type Delivery struct {
	// Event is encoded the way a producer (the relay) publishes it: the
	// JSON envelope as the body, message_id and type from the event. An
	// event a producer would refuse (no ID or type) is delivered anyway,
	// as a broken producer would send it.
	Event warren.Event

	// Body, when not nil, is delivered instead of the encoded Event: to
	// see what the consumer does with bytes no producer of warren writes.
	Body []byte

	// Headers are added to the message's headers (a traceparent, the
	// dead-letter headers of an earlier failure, …). On a first delivery
	// (Attempt 0 or 1) the consumer ignores the failure history among them,
	// as it does for anything published to its exchange: see Attempt.
	Headers map[string]any

	// Attempt is which attempt this delivery is: 1 for the first, n when
	// n-1 attempts failed before. A first delivery comes through the
	// consumer's exchange, as a producer publishes it. A later one comes
	// the way a retry does, from a retry tier through the default
	// exchange, with the attempts header set to n-1 and the origin
	// exchange and routing key of its first failure (unless Headers set
	// them): the consumer trusts failure history only on that path. Zero
	// is the same as 1.
	Attempt int
}

// Result is what the consumer would do with a delivery.
type Result struct {
	// Disposition is consumer.Done, Skipped or Duplicate (acked),
	// Retried or Deferred (moved to a retry tier, Queue), DeadLettered
	// (moved to the DLQ, Queue), or Requeued (handed back to the broker
	// because ctx had ended: the shutdown grace ran out).
	Disposition consumer.Disposition

	// Queue is where the consumer would publish the message's copy: a
	// retry tier for Retried and Deferred, the DLQ for DeadLettered;
	// empty otherwise.
	Queue string

	// Delay is the retry tier's delay, for Retried and Deferred.
	Delay time.Duration

	// Headers are the headers of that copy: for a retry and a dead letter
	// stamped with the dlq metadata (attempts made, error, class, origin),
	// and never carrying the broker's death headers. Nil when nothing
	// would be published.
	Headers map[string]any

	// Class says why a DeadLettered message is dead: dlq.ClassPermanent,
	// ClassExhausted, ClassUndecodable or ClassUnhandled.
	Class dlq.Class

	// Unavailable marks a Deferred message deferred because a dependency
	// was unavailable ([warren.Unavailable]).
	Unavailable bool

	// EventType is the decoded event's type; empty when the body did not
	// decode.
	EventType string

	// Attempt is the attempt that was handled (1 for the first).
	Attempt int

	// Err is the handler's error (or the decoder's, for an undecodable
	// body); nil when the handler succeeded.
	Err error
}

// evaluate is the consumer's own: see package kitlink.
var evaluate = kitlink.Evaluate.(func(context.Context, *consumer.BaseConsumer, amqp.Delivery) (consumer.Settlement, kitlink.Move))

// Deliver runs d through c's middleware chain and handlers, as one of c's
// workers would, and returns what c would do with it. It decides with the
// consumer's own code; only the publish and the ack are left out, so no
// broker is needed and c need not run. Middleware and handlers run for
// real: a dedup store remembers the event, a handler's writes happen.
//
// ctx is the handler's context. One that has ended stands for a shutdown
// whose grace ran out under the handler: a failure then makes the message
// Requeued, as it does in the consumer.
func Deliver(ctx context.Context, c *consumer.BaseConsumer, d Delivery) Result {
	s, mv := evaluate(ctx, c, d.delivery(c.Topology()))
	return Result{
		Disposition: s.Disposition,
		Queue:       mv.Queue,
		Delay:       mv.Delay,
		Headers:     mv.Headers,
		Class:       s.Class,
		Unavailable: s.Unavailable,
		EventType:   s.EventType,
		Attempt:     mv.Attempt,
		Err:         mv.Err,
	}
}

// delivery builds the AMQP delivery the broker would hand over for d to
// the consumer of topo.
func (d Delivery) delivery(topo consumer.Topology) amqp.Delivery {
	msg, err := amqpx.EventPublishing(d.Event)
	if err != nil {
		// Not an event a producer would send: encode it regardless, for
		// the consumer to refuse.
		body, _ := json.Marshal(d.Event)
		msg = amqp.Publishing{MessageId: d.Event.ID, Type: d.Event.Type, ContentType: "application/json", Body: body}
	}
	if d.Body != nil {
		msg.Body = d.Body
	}
	headers := amqp.Table{}
	maps.Copy(headers, msg.Headers)
	maps.Copy(headers, d.Headers)
	// A producer publishes to the exchange; the relay routes by event type.
	exchange, routingKey := topo.Exchange, msg.Type
	if d.Attempt > 1 {
		// A retry tier dead-letters the copy back through the default
		// exchange, to the queue, with what the first failure stamped.
		headers[dlq.HeaderAttempts] = int32(d.Attempt - 1)
		setIfMissing(headers, dlq.HeaderOriginExchange, exchange)
		setIfMissing(headers, dlq.HeaderOriginRoutingKey, routingKey)
		exchange, routingKey = "", topo.Queue
	}
	return amqp.Delivery{
		Headers:      headers,
		ContentType:  msg.ContentType,
		DeliveryMode: msg.DeliveryMode,
		MessageId:    msg.MessageId,
		Timestamp:    msg.Timestamp,
		Type:         msg.Type,
		DeliveryTag:  1,
		Exchange:     exchange,
		RoutingKey:   routingKey,
		Body:         msg.Body,
	}
}

func setIfMissing(h amqp.Table, name, value string) {
	if _, ok := h[name]; !ok {
		h[name] = value
	}
}
