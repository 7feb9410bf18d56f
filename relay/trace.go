package relay

import (
	"context"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/warrenmq/warren/internal/tracecontext"
)

// tracerName names the relay's spans' instrumentation scope.
const tracerName = "github.com/warrenmq/warren/relay"

// traceMessage puts into msg's headers the trace context the consumer
// continues. With a tracer it first starts a producer span for the
// publish, a child of the row's trace context (or a new trace when the
// row has none), and the headers carry that span; end finishes it with
// the publish's verdict. Without a tracer the row's context passes
// through unchanged and end does nothing.
func (r *Relay) traceMessage(ctx context.Context, c claimed, msg *amqp.Publishing) (end func(error)) {
	traceParent, traceState := c.TraceParent, c.TraceState
	end = func(error) {}
	if r.tracer != nil {
		parent := tracecontext.ContextWithRemote(ctx, traceParent, traceState)
		_, span := tracecontext.StartSpan(parent, r.tracer, "publish", trace.SpanKindProducer,
			tracecontext.Messaging{Operation: "send", Destination: r.cfg.Exchange, RoutingKey: c.Event.Type, MessageID: c.Event.ID},
			attribute.Int("warren.outbox.attempt", c.Attempts))
		traceParent, traceState = tracecontext.Format(span.SpanContext())
		end = func(err error) { tracecontext.EndSpan(span, err) }
	}
	msg.Headers = tracecontext.Inject(msg.Headers, traceParent, traceState)
	return end
}
