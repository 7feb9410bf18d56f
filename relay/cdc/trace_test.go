package cdc_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/internal/testenv/spanrecorder"
)

// With a TracerProvider the CDC relay records a producer span per event,
// as the polling relay does: a child of the span the producer stored with
// the row, ended with the broker's confirm, and carried by the message's
// traceparent so that the consumer's span is its child.
func TestAPublishSpanJoinsTheProducersTrace(t *testing.T) {
	t.Parallel()
	tp := spanrecorder.New() // records the spans it gives out

	e := newEnv(t)
	e.bindQueue()
	cfg := e.config()
	cfg.TracerProvider = tp
	e.start(cfg)

	ctx, producer := tp.Tracer("test").Start(context.Background(), "create work item")
	tx, err := e.ob.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.ob.Table.Publish(ctx, tx, testenv.OutboxEvent("traced-1")); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	producer.End()

	ch := testenv.Channel(t)
	deliveries, err := ch.Consume(e.queue, "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	var traceparent string
	select {
	case d := <-deliveries:
		traceparent, _ = d.Headers["traceparent"].(string)
	case <-time.After(60 * time.Second):
		t.Fatal("the event never arrived")
	}

	var publish *spanrecorder.Span
	testenv.WaitFor(t, 60*time.Second, "the relay's publish span to end", func() bool {
		for _, s := range tp.Ended() {
			if s.SpanKind() == trace.SpanKindProducer {
				publish = s
			}
		}
		return publish != nil
	})
	if publish.Name() != "publish "+e.exchange {
		t.Errorf("span name %q, want %q", publish.Name(), "publish "+e.exchange)
	}
	if publish.SpanContext().TraceID() != producer.SpanContext().TraceID() || publish.Parent().SpanID() != producer.SpanContext().SpanID() {
		t.Errorf("the publish span is in trace %s under %s; want the producer's trace %s under its span %s",
			publish.SpanContext().TraceID(), publish.Parent().SpanID(), producer.SpanContext().TraceID(), producer.SpanContext().SpanID())
	}
	if publish.Status().Code == codes.Error {
		t.Errorf("the publish span ended with an error: %s", publish.Status().Description)
	}
	if !strings.Contains(traceparent, publish.SpanContext().SpanID().String()) {
		t.Errorf("the message's traceparent %q does not carry the publish span %s", traceparent, publish.SpanContext().SpanID())
	}
}
