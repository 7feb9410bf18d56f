package tracecontext

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"

	"go.opentelemetry.io/otel/trace"
)

// Header names, as the W3C recommendation spells them. They are used
// unchanged as AMQP message headers, as OpenTelemetry's RabbitMQ
// instrumentations do.
const (
	TraceParentHeader = "traceparent"
	TraceStateHeader  = "tracestate"
)

// knownFlags are the trace-flags bits version 00 defines.
const knownFlags = trace.FlagsSampled | trace.FlagsRandom

// ErrMalformed is wrapped by Parse's errors.
var ErrMalformed = errors.New("malformed traceparent")

// Format returns sc's traceparent and tracestate header values, or two
// empty strings when sc is not valid. Only the flags the recommendation
// defines (sampled, random) are kept.
func Format(sc trace.SpanContext) (traceparent, tracestate string) {
	if !sc.IsValid() {
		return "", ""
	}
	tid, sid := sc.TraceID(), sc.SpanID()
	flags := [1]byte{byte(sc.TraceFlags() & knownFlags)}
	var b [55]byte
	copy(b[:], "00-")
	hex.Encode(b[3:35], tid[:])
	b[35] = '-'
	hex.Encode(b[36:52], sid[:])
	b[52] = '-'
	hex.Encode(b[53:55], flags[:])
	return string(b[:]), sc.TraceState().String()
}

// FromContext returns the traceparent and tracestate of the span in ctx,
// or two empty strings when ctx carries none.
func FromContext(ctx context.Context) (traceparent, tracestate string) {
	return Format(trace.SpanContextFromContext(ctx))
}

// Parse returns the remote span context that traceparent and tracestate
// describe. A malformed traceparent is an error wrapping ErrMalformed; a
// malformed tracestate is dropped, as the recommendation asks, and the
// traceparent still used.
func Parse(traceparent, tracestate string) (trace.SpanContext, error) {
	// version "-" trace-id "-" parent-id "-" trace-flags, 55 bytes in
	// version 00. A later version may append fields after a dash; version
	// ff is forbidden.
	const size = 55
	tp := traceparent
	if len(tp) < size {
		return trace.SpanContext{}, malformed(traceparent, "too short")
	}
	version, err := hexByte(tp[0:2])
	switch {
	case err != nil:
		return trace.SpanContext{}, malformed(traceparent, "version is not lower-case hex")
	case version == 0xff:
		return trace.SpanContext{}, malformed(traceparent, "version ff is invalid")
	case version == 0 && len(tp) != size:
		return trace.SpanContext{}, malformed(traceparent, "version 00 must be 55 bytes")
	case len(tp) > size && tp[size] != '-':
		return trace.SpanContext{}, malformed(traceparent, "fields must be separated by dashes")
	case tp[2] != '-' || tp[35] != '-' || tp[52] != '-':
		return trace.SpanContext{}, malformed(traceparent, "fields must be separated by dashes")
	}
	// TraceIDFromHex and SpanIDFromHex accept lower-case hex only and
	// refuse the all-zero ids, as the recommendation does.
	tid, err := trace.TraceIDFromHex(tp[3:35])
	if err != nil {
		return trace.SpanContext{}, malformed(traceparent, "trace-id: "+err.Error())
	}
	sid, err := trace.SpanIDFromHex(tp[36:52])
	if err != nil {
		return trace.SpanContext{}, malformed(traceparent, "parent-id: "+err.Error())
	}
	flags, err := hexByte(tp[53:55])
	switch {
	case err != nil:
		return trace.SpanContext{}, malformed(traceparent, "trace-flags are not lower-case hex")
	case version == 0 && trace.TraceFlags(flags)&^knownFlags != 0:
		return trace.SpanContext{}, malformed(traceparent, "version 00 defines only the sampled and random flags")
	}
	cfg := trace.SpanContextConfig{
		TraceID:    tid,
		SpanID:     sid,
		TraceFlags: trace.TraceFlags(flags) & knownFlags,
		Remote:     true,
	}
	if tracestate != "" {
		if ts, err := trace.ParseTraceState(tracestate); err == nil {
			cfg.TraceState = ts
		}
	}
	return trace.NewSpanContext(cfg), nil
}

// ContextWithRemote returns ctx carrying the remote span context that the
// headers describe, or ctx itself when there is no valid traceparent.
func ContextWithRemote(ctx context.Context, traceparent, tracestate string) context.Context {
	if traceparent == "" {
		return ctx
	}
	sc, err := Parse(traceparent, tracestate)
	if err != nil {
		return ctx
	}
	return trace.ContextWithRemoteSpanContext(ctx, sc)
}

// hexByte decodes two lower-case hex digits.
func hexByte(s string) (byte, error) {
	var v byte
	for i := range 2 {
		c := s[i]
		switch {
		case '0' <= c && c <= '9':
			v = v<<4 | (c - '0')
		case 'a' <= c && c <= 'f':
			v = v<<4 | (c - 'a' + 10)
		default:
			return 0, errors.New("not lower-case hex")
		}
	}
	return v, nil
}

func malformed(traceparent, why string) error {
	if len(traceparent) > 80 {
		traceparent = traceparent[:80] + "…"
	}
	return fmt.Errorf("%w %q: %s", ErrMalformed, traceparent, why)
}
