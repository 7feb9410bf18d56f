package consumer

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/internal/amqpx"
)

// countingSender is an ackSender that counts the frames it is asked to send.
type countingSender struct{ acks, nacks atomic.Int64 }

func (s *countingSender) Ack(uint64, bool) error        { s.acks.Add(1); return nil }
func (s *countingSender) Nack(uint64, bool, bool) error { s.nacks.Add(1); return nil }

// benchDelivery is what amqp091-go hands the consumer for one event
// published by the relay through the consumer's exchange.
func benchDelivery(b *testing.B, tag uint64) amqp.Delivery {
	b.Helper()
	ev := warren.Event{
		ID: "6f1c2a9e-0000-4000-8000-000000000001", Type: "workitem.updated", EntityType: "issue",
		EntityID: "2b8d5f3e-7c41-4a0b-9e6d-1f2a3b4c5d6e", WorkspaceID: "9a8b7c6d-5e4f-4321-8765-0fedcba98765",
		ProjectID: "1a2b3c4d-5e6f-4a1b-8c2d-3e4f5a6b7c8d", InitiatorID: "u-42", InitiatorType: "USER",
		Payload:   warren.Payload{Data: []byte(`{"state":"done","priority":"high"}`), PreviousAttributes: []byte(`{"state":"todo"}`)},
		CreatedAt: time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC), Version: "1.0",
	}
	p, err := amqpx.EventPublishing(ev)
	if err != nil {
		b.Fatal(err)
	}
	return amqp.Delivery{
		Headers: p.Headers, ContentType: p.ContentType, DeliveryMode: p.DeliveryMode, MessageId: p.MessageId,
		Timestamp: p.Timestamp, Type: p.Type, Body: p.Body, DeliveryTag: tag, Exchange: "bench.ex",
	}
}

// BenchmarkProcess measures what a worker does with one delivery of a
// no-op handler, from the job to the acker's ack frame: decode and
// validate, route, the handler, the ack policy, the hand-over to the
// acker. The broker's side (amqp091-go's frame parsing, the socket) is
// left out; devtools/bench measures it. allocs/op and B/op are per
// delivery. Run with
//
//	go test -run '^$' -bench Process -benchmem ./consumer/
func BenchmarkProcess(b *testing.B) {
	c, err := New(Config{URL: "amqp://localhost", Name: "bench", Exchange: "bench.ex",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	c.HandleFunc("workitem.", func(context.Context, *warren.Message) error { return nil })
	h := c.handler()
	sender := &countingSender{}
	a := newAcker(sender, 256, c.log)
	go a.run()
	defer a.stopAndFlush()
	s := &session{}
	d := benchDelivery(b, 0)
	ctx := context.Background()
	b.ReportAllocs()
	var tag uint64
	for b.Loop() {
		tag++
		d.DeliveryTag = tag
		c.process(ctx, h, job{d: d, s: s, acker: a})
	}
	b.StopTimer()
	if got := c.stats.done.Load(); got != tag {
		b.Fatalf("done %d of %d", got, tag)
	}
}
