// Package tracecontext reads and writes the W3C Trace Context headers
// (traceparent and tracestate) that carry a trace from the transaction
// that writes an outbox row, through the relay and the broker, to the
// handler that consumes the event.
//
// It depends on OpenTelemetry's trace API only, not on the otel package
// with its global providers nor on its propagation package (which pulls
// net/http in), so the relay and the consumer carry trace context at the
// cost of a few string operations. It also starts and ends the relay's
// and the consumer's messaging spans, so both describe a message alike. See
// docs/adr/015-observability-trace-propagation.md.
package tracecontext
