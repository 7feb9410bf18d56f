package engine

import (
	"context"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/warrenmq/warren/internal/tracecontext"
	"github.com/warrenmq/warren/outbox"
)

// Trace puts into msg's headers the trace context the consumer continues.
// With a tracer it first starts a producer span for the publish, a child
// of the row's trace context (or a new trace when the row has none), and
// the headers carry that span; end finishes it with the publish's
// verdict. Without a tracer the row's context passes through unchanged
// and end does nothing. attempt is the row's attempt, recorded on the
// span.
func Trace(ctx context.Context, tracer trace.Tracer, exchange string, row outbox.Row, attempt int, msg *amqp.Publishing) (end func(error)) {
	traceParent, traceState := row.TraceParent, row.TraceState
	end = func(error) {}
	if tracer != nil {
		parent := tracecontext.ContextWithRemote(ctx, traceParent, traceState)
		_, span := tracecontext.StartSpan(parent, tracer, "publish", trace.SpanKindProducer,
			tracecontext.Messaging{Operation: "send", Destination: exchange, RoutingKey: row.Event.Type, MessageID: row.Event.ID},
			attribute.Int("warren.outbox.attempt", attempt))
		traceParent, traceState = tracecontext.Format(span.SpanContext())
		end = func(err error) { tracecontext.EndSpan(span, err) }
	}
	msg.Headers = tracecontext.Inject(msg.Headers, traceParent, traceState)
	return end
}
