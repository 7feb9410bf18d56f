package consumer_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/consumer"
	"github.com/warrenmq/warren/internal/amqpx"
	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/internal/testenv/spanrecorder"
)

// TestRetryStaysInTheTrace: a message with a traceparent header fails once
// and is retried; both attempts' handlers run in the message's trace, each
// in a span of its own whose parent is the header's, the first one marked
// as an error.
func TestRetryStaysInTheTrace(t *testing.T) {
	t.Parallel()
	tp := spanrecorder.New() // records the spans it gives out
	c := newConsumer(t, func(cfg *consumer.Config) {
		cfg.TracerProvider = tp
		cfg.RetryDelays = []time.Duration{time.Millisecond}
	})
	var mu sync.Mutex
	var inHandler []trace.SpanContext
	c.HandleFunc("", func(ctx context.Context, m *warren.Message) error {
		mu.Lock()
		defer mu.Unlock()
		inHandler = append(inHandler, trace.SpanContextFromContext(ctx))
		if m.Attempt == 1 {
			return errBoom
		}
		return nil
	})
	start(t, c)

	const traceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	msg, err := amqpx.EventPublishing(event("traced-1", "workitem.updated"))
	if err != nil {
		t.Fatal(err)
	}
	msg.Headers["traceparent"] = traceParent
	newPublisher(t).raw(c.Topology().Exchange, msg)
	testenv.WaitFor(t, 60*time.Second, "two handler spans", func() bool { return len(tp.Ended()) == 2 })

	spans := tp.Ended()
	for i, s := range spans {
		if got := s.SpanContext().TraceID().String(); got != "4bf92f3577b34da6a3ce929d0e0e4736" {
			t.Errorf("span %d in trace %s", i, got)
		}
		if got := s.Parent().SpanID().String(); got != "00f067aa0ba902b7" || !s.Parent().IsRemote() {
			t.Errorf("span %d: parent %s (remote %v), want the header's span", i, got, s.Parent().IsRemote())
		}
		if s.SpanKind() != trace.SpanKindConsumer || s.Name() != "process "+c.Topology().Queue {
			t.Errorf("span %d: %v %q", i, s.SpanKind(), s.Name())
		}
	}
	if spans[0].Status().Code != codes.Error || spans[1].Status().Code == codes.Error {
		t.Errorf("statuses %v then %v; want the failed attempt an error, the retry not", spans[0].Status(), spans[1].Status())
	}
	mu.Lock()
	defer mu.Unlock()
	for i, sc := range inHandler {
		if sc.SpanID() != spans[i].SpanContext().SpanID() {
			t.Errorf("attempt %d: the handler's context holds span %s, not its own %s", i+1, sc.SpanID(), spans[i].SpanContext().SpanID())
		}
	}
}

// TestMalformedTraceparentIsIgnored: a bad header neither fails the
// message nor leaks into the handler's context.
func TestMalformedTraceparentIsIgnored(t *testing.T) {
	t.Parallel()
	c := newConsumer(t, nil)
	seen := make(chan trace.SpanContext, 1)
	c.HandleFunc("", func(ctx context.Context, _ *warren.Message) error {
		seen <- trace.SpanContextFromContext(ctx)
		return nil
	})
	start(t, c)
	msg, err := amqpx.EventPublishing(event("bad-trace-1", "workitem.updated"))
	if err != nil {
		t.Fatal(err)
	}
	msg.Headers["traceparent"] = "00-not-a-trace-01"
	newPublisher(t).raw(c.Topology().Exchange, msg)
	select {
	case sc := <-seen:
		if sc.IsValid() {
			t.Errorf("handler got span context %v from a malformed header", sc)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the message was never handled")
	}
	if s := c.Stats(); s.DeadLettered != 0 {
		t.Errorf("a malformed traceparent dead-lettered the message: %+v", s)
	}
}
