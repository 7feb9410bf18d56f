package tracecontext_test

import (
	"context"
	"errors"
	"testing"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/warrenmq/warren/internal/tracecontext"
)

const (
	validParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	validState  = "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"
)

func TestRoundTrip(t *testing.T) {
	sc, err := tracecontext.Parse(validParent, validState)
	if err != nil {
		t.Fatal(err)
	}
	if !sc.IsRemote() || !sc.IsSampled() {
		t.Errorf("parsed span context: remote %v sampled %v, want both", sc.IsRemote(), sc.IsSampled())
	}
	if got := sc.TraceID().String(); got != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("trace id %s", got)
	}
	tp, ts := tracecontext.Format(sc)
	if tp != validParent || ts != validState {
		t.Errorf("Format = %q, %q; want %q, %q", tp, ts, validParent, validState)
	}
	ctx := tracecontext.ContextWithRemote(context.Background(), tp, ts)
	if tp2, _ := tracecontext.FromContext(ctx); tp2 != validParent {
		t.Errorf("FromContext = %q", tp2)
	}
}

func TestNoTraceIsEmpty(t *testing.T) {
	if tp, ts := tracecontext.FromContext(context.Background()); tp != "" || ts != "" {
		t.Errorf("FromContext(background) = %q, %q", tp, ts)
	}
	ctx := context.Background()
	if got := tracecontext.ContextWithRemote(ctx, "", ""); got != ctx {
		t.Error("ContextWithRemote without a traceparent changed the context")
	}
	if got := tracecontext.ContextWithRemote(ctx, "garbage", ""); got != ctx {
		t.Error("ContextWithRemote with a malformed traceparent changed the context")
	}
}

func TestMalformed(t *testing.T) {
	for name, tp := range map[string]string{
		"empty":            "",
		"short":            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0",
		"upper case":       "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
		"version ff":       "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"zero trace id":    "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
		"zero span id":     "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
		"v00 extra field":  validParent + "-extra",
		"v00 unknown flag": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-09",
		"no dashes":        "00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01",
		"v01 no dash":      "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := tracecontext.Parse(tp, ""); !errors.Is(err, tracecontext.ErrMalformed) {
				t.Errorf("Parse(%q) error = %v, want ErrMalformed", tp, err)
			}
		})
	}
}

func TestLaterVersionAndBadStateAreTolerated(t *testing.T) {
	sc, err := tracecontext.Parse("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-comes-next", "not a = valid,,state")
	if err != nil {
		t.Fatalf("a later version with more fields must parse: %v", err)
	}
	if sc.TraceState().Len() != 0 {
		t.Errorf("a malformed tracestate must be dropped, got %q", sc.TraceState())
	}
}

// FuzzAgreesWithOpenTelemetry checks Parse and Format against
// OpenTelemetry's own propagator (a test-only dependency): both must
// accept the same headers and read the same span context from them.
func FuzzAgreesWithOpenTelemetry(f *testing.F) {
	for _, s := range []string{validParent, "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-03-x", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-02", "ff-" + validParent[3:], ""} {
		f.Add(s, validState)
	}
	prop := propagation.TraceContext{}
	f.Fuzz(func(t *testing.T, tp, ts string) {
		want := trace.SpanContextFromContext(prop.Extract(context.Background(), propagation.MapCarrier{"traceparent": tp, "tracestate": ts}))
		got, err := tracecontext.Parse(tp, ts)
		if want.IsValid() != (err == nil) {
			t.Fatalf("Parse(%q) error = %v; OpenTelemetry valid = %v", tp, err, want.IsValid())
		}
		if err != nil {
			return
		}
		if !got.Equal(want) {
			t.Fatalf("Parse(%q, %q) = %v, OpenTelemetry reads %v", tp, ts, got, want)
		}
		carrier := propagation.MapCarrier{}
		prop.Inject(trace.ContextWithSpanContext(context.Background(), got), carrier)
		gotTP, gotTS := tracecontext.Format(got)
		if gotTP != carrier.Get("traceparent") || gotTS != carrier.Get("tracestate") {
			t.Fatalf("Format = %q, %q; OpenTelemetry writes %q, %q", gotTP, gotTS, carrier.Get("traceparent"), carrier.Get("tracestate"))
		}
	})
}

// Inject writes what Extract reads, and leaves headers alone when there is
// no trace to carry.
func TestInjectExtract(t *testing.T) {
	if h := tracecontext.Inject(nil, "", "k=v"); h != nil {
		t.Errorf("Inject without a traceparent made headers %v", h)
	}
	h := tracecontext.Inject(nil, validParent, "")
	if _, ok := h[tracecontext.TraceStateHeader]; ok || h[tracecontext.TraceParentHeader] != validParent {
		t.Fatalf("Inject = %v, want the traceparent alone", h)
	}
	sc := trace.SpanContextFromContext(tracecontext.Extract(context.Background(), h))
	if got, _ := tracecontext.Format(sc); got != validParent || !sc.IsRemote() {
		t.Errorf("Extract found %q (remote %v), want %q", got, sc.IsRemote(), validParent)
	}
	if sc := trace.SpanContextFromContext(tracecontext.Extract(context.Background(), map[string]any{"traceparent": 42})); sc.IsValid() {
		t.Errorf("Extract took a non-string traceparent: %v", sc)
	}
}
