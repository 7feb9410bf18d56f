package relay_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/consumer"
	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/internal/testenv/spanrecorder"
	"github.com/warrenmq/warren/outbox"
)

// traced runs a BaseConsumer on the env's exchange whose handler reports
// the span context it is called with.
func traced(t *testing.T, e *env, tp trace.TracerProvider) (<-chan trace.SpanContext, *consumer.BaseConsumer) {
	t.Helper()
	c, err := consumer.New(consumer.Config{
		URL: testenv.AMQPURL(t), Name: testenv.Name(t, "c"), Exchange: e.exchange, TracerProvider: tp, Logger: testLogger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	topo := c.Topology()
	testenv.CleanupQueues(t, topo.Queues()...)
	testenv.CleanupExchanges(t, topo.DLX)
	seen := make(chan trace.SpanContext, 1)
	c.HandleFunc("", func(ctx context.Context, _ *warren.Message) error {
		seen <- trace.SpanContextFromContext(ctx)
		return nil
	})
	testenv.RunInBackground(t, c.Run)
	testenv.WaitFor(t, 60*time.Second, "the consumer to be ready", func() bool { return c.Health().Ready })
	return seen, c
}

func handled(t *testing.T, seen <-chan trace.SpanContext) trace.SpanContext {
	t.Helper()
	select {
	case sc := <-seen:
		return sc
	case <-time.After(60 * time.Second):
		t.Fatal("the handler never ran")
		return trace.SpanContext{}
	}
}

// publishIn writes ev in a transaction begun, and published, with ctx,
// so the row stores the trace context of ctx's span.
func (e *env) publishIn(ctx context.Context, ev warren.Event) {
	e.t.Helper()
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := e.outbox.Publish(ctx, tx, ev); err != nil {
		e.t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		e.t.Fatal(err)
	}
}

// TestOneTraceFromPublishToHandler follows one event from the producer's
// span through the outbox row, the relay's publish span and the AMQP
// headers to the handler's span: one trace id, each span the child of the
// one before.
func TestOneTraceFromPublishToHandler(t *testing.T) {
	t.Parallel()
	tp := spanrecorder.New() // records the spans it gives out

	e := newEnv(t)
	seen, c := traced(t, e, tp)
	cfg := e.config(testenv.Name(t, "relay"))
	cfg.TracerProvider = tp
	e.start(cfg)

	ctx, producer := tp.Tracer("test").Start(context.Background(), "create work item")
	e.publishIn(ctx, event("traced-1"))
	producer.End()

	inHandler := handled(t, seen)
	want := producer.SpanContext().TraceID()
	if inHandler.TraceID() != want {
		t.Fatalf("the handler runs in trace %s, the producer in %s", inHandler.TraceID(), want)
	}

	var publish, process *spanrecorder.Span
	testenv.WaitFor(t, 60*time.Second, "the relay's and the consumer's spans to end", func() bool {
		for _, s := range tp.Ended() {
			switch s.SpanKind() {
			case trace.SpanKindProducer:
				publish = s
			case trace.SpanKindConsumer:
				process = s
			}
		}
		return publish != nil && process != nil
	})
	if publish.Name() != "publish "+e.exchange || process.Name() != "process "+c.Topology().Queue {
		t.Errorf("span names %q and %q", publish.Name(), process.Name())
	}
	for _, s := range []*spanrecorder.Span{publish, process} {
		if s.SpanContext().TraceID() != want {
			t.Errorf("span %q is in trace %s, want %s", s.Name(), s.SpanContext().TraceID(), want)
		}
		if s.Status().Code == codes.Error {
			t.Errorf("span %q ended with an error: %s", s.Name(), s.Status().Description)
		}
	}
	if publish.Parent().SpanID() != producer.SpanContext().SpanID() {
		t.Errorf("the relay's span is a child of %s, want the producer's span %s", publish.Parent().SpanID(), producer.SpanContext().SpanID())
	}
	if process.Parent().SpanID() != publish.SpanContext().SpanID() || !process.Parent().IsRemote() {
		t.Errorf("the handler's span is a child of %s (remote %v), want the relay's span %s", process.Parent().SpanID(), process.Parent().IsRemote(), publish.SpanContext().SpanID())
	}
	if inHandler.SpanID() != process.SpanContext().SpanID() {
		t.Errorf("the handler's context holds span %s, want its own span %s", inHandler.SpanID(), process.SpanContext().SpanID())
	}
}

// TestTraceCarriedWithoutTracers: with no TracerProvider anywhere, the
// producer's trace context still reaches the handler, unchanged, as its
// remote parent.
func TestTraceCarriedWithoutTracers(t *testing.T) {
	t.Parallel()
	tp := spanrecorder.New() // the producer's only
	e := newEnv(t)
	seen, _ := traced(t, e, nil)
	e.start(e.config(testenv.Name(t, "relay")))

	ctx, producer := tp.Tracer("test").Start(context.Background(), "create work item")
	e.publishIn(ctx, event("carried-1"))
	producer.End()
	inHandler := handled(t, seen)
	if !inHandler.Equal(producer.SpanContext().WithRemote(true)) {
		t.Errorf("handler's span context %v, want the producer's %v as a remote parent", inHandler, producer.SpanContext())
	}
}

// TestNoTraceNoHeader: an event published without a span stores no trace
// context, and its message carries no traceparent header.
func TestNoTraceNoHeader(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.bindQueue()
	got := consume(t, e.queue)
	cfg := e.config(testenv.Name(t, "relay"))
	cfg.KeepDelivered = true
	e.start(cfg)
	e.publish(event("untraced-1"))
	got.waitDistinct(t, 1, 60*time.Second)
	if n := e.count(`traceparent IS NOT NULL OR tracestate IS NOT NULL`); n != 0 {
		t.Errorf("%d rows store a trace context nobody gave", n)
	}
	for _, d := range got.deliveries() {
		if _, ok := d.Headers["traceparent"]; ok {
			t.Errorf("message %s carries a traceparent: %v", d.MessageId, d.Headers["traceparent"])
		}
	}
}

// TestRowKeepsTraceContext: Publish stores the span's trace context in the
// row, where Dead and Purge's archive hook see it.
func TestRowKeepsTraceContext(t *testing.T) {
	t.Parallel()
	tp := spanrecorder.New()
	e := newEnv(t)
	ctx, span := tp.Tracer("test").Start(context.Background(), "producer")
	e.publishIn(ctx, event("kept-1"))
	span.End()
	e.exec(`UPDATE {table} SET state = 'dead', finished_at = now()`)
	rows, err := e.outbox.Dead(context.Background(), e.pool, outbox.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 {
		t.Fatalf("%d dead rows, want 1", len(rows))
	}
	want := "00-" + span.SpanContext().TraceID().String() + "-" + span.SpanContext().SpanID().String() + "-01"
	if rows[0].TraceParent != want {
		t.Errorf("row's traceparent %q, want %q", rows[0].TraceParent, want)
	}
}
