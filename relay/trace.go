package relay

import (
	"context"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
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
		_, span := r.tracer.Start(parent, "publish "+r.cfg.Exchange,
			trace.WithSpanKind(trace.SpanKindProducer),
			trace.WithAttributes(
				attribute.String("messaging.system", "rabbitmq"),
				attribute.String("messaging.operation.type", "send"),
				attribute.String("messaging.destination.name", r.cfg.Exchange),
				attribute.String("messaging.rabbitmq.destination.routing_key", c.Event.Type),
				attribute.String("messaging.message.id", c.Event.ID),
				attribute.Int("warren.outbox.attempt", c.Attempts),
			))
		traceParent, traceState = tracecontext.Format(span.SpanContext())
		end = func(err error) {
			if err != nil {
				span.RecordError(err)
				span.SetStatus(codes.Error, err.Error())
			}
			span.End()
		}
	}
	if traceParent != "" {
		if msg.Headers == nil {
			msg.Headers = amqp.Table{}
		}
		msg.Headers[tracecontext.TraceParentHeader] = traceParent
		if traceState != "" {
			msg.Headers[tracecontext.TraceStateHeader] = traceState
		}
	}
	return end
}
