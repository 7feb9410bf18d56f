package tracecontext

import (
	"context"
	"reflect"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/warrenmq/warren/internal/redact"
)

// The helpers below are the span and header handling the relay (which
// publishes) and the consumer (which processes) share. Headers are plain
// maps, so this package needs no AMQP client; an amqp.Table is one.

// Messaging is what a message operation's span says about the message, in
// OpenTelemetry's messaging semantic conventions for RabbitMQ.
type Messaging struct {
	Operation   string // messaging.operation.type: "send" or "process"
	Destination string // the exchange published to, or the queue consumed from
	RoutingKey  string
	MessageID   string
}

// StartSpan starts a span of kind named "<name> <destination>" with m's
// attributes and extra, a child of ctx's span context.
func StartSpan(ctx context.Context, tracer trace.Tracer, name string, kind trace.SpanKind, m Messaging, extra ...attribute.KeyValue) (context.Context, trace.Span) {
	attrs := append([]attribute.KeyValue{
		attribute.String("messaging.system", "rabbitmq"),
		attribute.String("messaging.operation.type", m.Operation),
		attribute.String("messaging.destination.name", m.Destination),
		attribute.String("messaging.rabbitmq.destination.routing_key", m.RoutingKey),
		attribute.String("messaging.message.id", m.MessageID),
	}, extra...)
	return tracer.Start(ctx, name+" "+m.Destination, trace.WithSpanKind(kind), trace.WithAttributes(attrs...))
}

// EndSpan ends span, first recording err on it and marking it failed when
// err is not nil. The error's text is redacted: spans leave the process
// for a tracing backend, and a handler's error may quote a secret.
func EndSpan(span trace.Span, err error) {
	if err != nil {
		text := redact.Secrets(err.Error())
		// span.RecordError, with the message redacted.
		span.AddEvent(semconv.ExceptionEventName, trace.WithAttributes(
			semconv.ExceptionType(typeName(err)), semconv.ExceptionMessage(text)))
		span.SetStatus(codes.Error, text)
	}
	span.End()
}

// typeName names err's type as span.RecordError does.
func typeName(err error) string {
	t := reflect.TypeOf(err)
	if t.PkgPath() == "" && t.Name() == "" {
		return t.String() // a pointer or another unnamed type
	}
	return t.PkgPath() + "." + t.Name()
}

// Inject writes the traceparent and tracestate headers (tracestate only
// when not empty) into headers, made when nil, and returns it. Without a
// traceparent it returns headers unchanged.
func Inject(headers map[string]any, traceparent, tracestate string) map[string]any {
	if traceparent == "" {
		return headers
	}
	if headers == nil {
		headers = map[string]any{}
	}
	headers[TraceParentHeader] = traceparent
	if tracestate != "" {
		headers[TraceStateHeader] = tracestate
	}
	return headers
}

// Extract returns ctx carrying the remote span context that headers'
// traceparent and tracestate describe, or ctx itself when they carry none
// that is valid.
func Extract(ctx context.Context, headers map[string]any) context.Context {
	traceparent, _ := headers[TraceParentHeader].(string)
	tracestate, _ := headers[TraceStateHeader].(string)
	return ContextWithRemote(ctx, traceparent, tracestate)
}
