package tracecontext_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/warrenmq/warren/internal/testenv/spanrecorder"
	"github.com/warrenmq/warren/internal/tracecontext"
)

// A failed span's status and exception event carry the error redacted:
// spans go to a tracing backend, outside the process.
func TestEndSpanRedactsTheError(t *testing.T) {
	recorder := spanrecorder.New()
	tracer := recorder.Tracer("test")
	_, span := tracecontext.StartSpan(context.Background(), tracer, "process", trace.SpanKindConsumer, tracecontext.Messaging{Operation: "process", Destination: "q"})
	tracecontext.EndSpan(span, errors.New("POST https://bob:s3cr3t-pw@hooks.example/x?token=tok-123: 500"))

	ended := recorder.Ended()
	if len(ended) != 1 {
		t.Fatalf("%d spans ended, want 1", len(ended))
	}
	s := ended[0]
	if s.Status().Code != codes.Error || s.Status().Description != "POST https://bob:xxxxx@hooks.example/x?token=xxxxx: 500" {
		t.Errorf("status %+v", s.Status())
	}
	var exception []string
	for _, e := range s.Events() {
		for _, a := range e.Attributes {
			exception = append(exception, e.Name+" "+string(a.Key)+"="+a.Value.String())
		}
	}
	all := strings.Join(exception, "\n")
	if !strings.Contains(all, "exception exception.type=*errors.errorString") || !strings.Contains(all, "exception.message=POST https://bob:xxxxx@") {
		t.Errorf("exception event:\n%s", all)
	}
	if strings.Contains(all, "s3cr3t-pw") || strings.Contains(all, "tok-123") {
		t.Errorf("exception event reveals a secret:\n%s", all)
	}
}
