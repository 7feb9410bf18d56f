package consumer

import (
	"context"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/internal/tracecontext"
)

// tracerName names the consumer's spans' instrumentation scope.
const tracerName = "github.com/warrenmq/warren/consumer"

// traceHandler gives the handler's context the trace context the message
// carries (the relay's publish, or the producer's transaction), so the
// handler continues that trace. With a tracer it also starts a consumer
// span for the handler, a child of that context; end finishes it with the
// handler's outcome. Without a traceparent header and a tracer it costs
// one map lookup.
func (c *BaseConsumer) traceHandler(ctx context.Context, d amqp.Delivery, m *warren.Message) (_ context.Context, end func(warren.Outcome, error)) {
	ctx = tracecontext.Extract(ctx, d.Headers)
	if c.tracer == nil {
		return ctx, func(warren.Outcome, error) {}
	}
	ctx, span := tracecontext.StartSpan(ctx, c.tracer, "process", trace.SpanKindConsumer,
		tracecontext.Messaging{Operation: "process", Destination: m.Queue, RoutingKey: d.RoutingKey, MessageID: m.Event.ID},
		attribute.String("warren.event.type", m.Event.Type),
		attribute.Int("warren.attempt", m.Attempt))
	return ctx, func(outcome warren.Outcome, err error) {
		span.SetAttributes(attribute.String("warren.outcome", outcome.String()))
		if outcome != warren.OutcomeRetry && outcome != warren.OutcomePermanent {
			err = nil // a skip or a duplicate is no failure
		}
		tracecontext.EndSpan(span, err)
	}
}
