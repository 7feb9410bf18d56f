package spanrecorder

import (
	"context"
	"crypto/rand"
	"fmt"
	"reflect"
	"slices"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
)

// Provider is a trace.TracerProvider whose tracers record every span.
type Provider struct {
	embedded.TracerProvider

	mu             sync.Mutex
	started, ended []*Span
}

var _ trace.TracerProvider = (*Provider)(nil)

// New returns a Provider that has recorded nothing.
func New() *Provider { return &Provider{} }

// Tracer implements trace.TracerProvider.
func (p *Provider) Tracer(string, ...trace.TracerOption) trace.Tracer { return tracer{p: p} }

// Started returns the spans started so far, in order.
func (p *Provider) Started() []*Span {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.started)
}

// Ended returns the spans ended so far, in the order they ended.
func (p *Provider) Ended() []*Span {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.ended)
}

type tracer struct {
	embedded.Tracer
	p *Provider
}

// Start implements trace.Tracer: the span is a child of ctx's span, or a
// root with a new trace id.
func (t tracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	cfg := trace.NewSpanStartConfig(opts...)
	parent := trace.SpanContextFromContext(ctx)
	if cfg.NewRoot() {
		parent = trace.SpanContext{}
	}
	c := trace.SpanContextConfig{TraceID: parent.TraceID(), TraceFlags: trace.FlagsSampled, TraceState: parent.TraceState()}
	if !parent.IsValid() {
		rand.Read(c.TraceID[:])
	}
	rand.Read(c.SpanID[:])
	s := &Span{p: t.p, name: name, kind: cfg.SpanKind(), parent: parent, sc: trace.NewSpanContext(c),
		attributes: slices.Clone(cfg.Attributes()), links: slices.Clone(cfg.Links())}
	t.p.mu.Lock()
	t.p.started = append(t.p.started, s)
	t.p.mu.Unlock()
	return trace.ContextWithSpan(ctx, s), s
}

// Status is a span's status.
type Status struct {
	Code        codes.Code
	Description string
}

// Event is an event added to a span.
type Event struct {
	Name       string
	Attributes []attribute.KeyValue
}

// Span is a recorded span: a trace.Span, and its record.
type Span struct {
	embedded.Span
	p *Provider

	mu         sync.Mutex
	name       string
	kind       trace.SpanKind
	parent, sc trace.SpanContext
	attributes []attribute.KeyValue
	links      []trace.Link
	status     Status
	events     []Event
	ended      bool
}

var _ trace.Span = (*Span)(nil)

// Name is the span's name.
func (s *Span) Name() string { s.mu.Lock(); defer s.mu.Unlock(); return s.name }

// SpanKind is the span's kind.
func (s *Span) SpanKind() trace.SpanKind { return s.kind }

// Parent is the span context the span was started under (invalid for a
// root).
func (s *Span) Parent() trace.SpanContext { return s.parent }

// Status is the span's status.
func (s *Span) Status() Status { s.mu.Lock(); defer s.mu.Unlock(); return s.status }

// Events are the events added to the span.
func (s *Span) Events() []Event { s.mu.Lock(); defer s.mu.Unlock(); return slices.Clone(s.events) }

// Attributes are the span's attributes.
func (s *Span) Attributes() []attribute.KeyValue {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.attributes)
}

// Links are the span's links.
func (s *Span) Links() []trace.Link { s.mu.Lock(); defer s.mu.Unlock(); return slices.Clone(s.links) }

// SpanContext implements trace.Span.
func (s *Span) SpanContext() trace.SpanContext { return s.sc }

// End implements trace.Span; a second End is ignored, as the SDK does.
func (s *Span) End(...trace.SpanEndOption) {
	s.mu.Lock()
	ended := s.ended
	s.ended = true
	s.mu.Unlock()
	if ended {
		return
	}
	s.p.mu.Lock()
	s.p.ended = append(s.p.ended, s)
	s.p.mu.Unlock()
}

// IsRecording implements trace.Span: true until End.
func (s *Span) IsRecording() bool { s.mu.Lock(); defer s.mu.Unlock(); return !s.ended }

// AddEvent implements trace.Span.
func (s *Span) AddEvent(name string, opts ...trace.EventOption) {
	cfg := trace.NewEventConfig(opts...)
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ended {
		s.events = append(s.events, Event{Name: name, Attributes: cfg.Attributes()})
	}
}

// AddLink implements trace.Span.
func (s *Span) AddLink(l trace.Link) { s.mu.Lock(); defer s.mu.Unlock(); s.links = append(s.links, l) }

// RecordError implements trace.Span as the SDK does: an "exception" event
// with the error's type and message.
func (s *Span) RecordError(err error, opts ...trace.EventOption) {
	if err == nil {
		return
	}
	opts = append(opts, trace.WithAttributes(
		attribute.String("exception.type", typeName(err)),
		attribute.String("exception.message", err.Error())))
	s.AddEvent("exception", opts...)
}

// typeName is the type's name as the SDK writes it in exception.type.
func typeName(v any) string {
	t := reflect.TypeOf(v)
	if t.PkgPath() == "" && t.Name() == "" {
		return t.String()
	}
	return fmt.Sprintf("%s.%s", t.PkgPath(), t.Name())
}

// SetStatus implements trace.Span: a description is kept only with
// codes.Error, and Ok is final, as in the SDK.
func (s *Span) SetStatus(code codes.Code, description string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended || s.status.Code == codes.Ok || code < s.status.Code {
		return
	}
	if code != codes.Error {
		description = ""
	}
	s.status = Status{Code: code, Description: description}
}

// SetName implements trace.Span; after End it does nothing, as in the SDK.
func (s *Span) SetName(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ended {
		s.name = name
	}
}

// SetAttributes implements trace.Span; after End it does nothing, as in
// the SDK.
func (s *Span) SetAttributes(kv ...attribute.KeyValue) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ended {
		s.attributes = append(s.attributes, kv...)
	}
}

// TracerProvider implements trace.Span.
func (s *Span) TracerProvider() trace.TracerProvider { return s.p }
