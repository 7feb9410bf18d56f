package consumertest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/consumer"
	"github.com/warrenmq/warren/consumer/consumertest"
	"github.com/warrenmq/warren/dedup/memory"
	"github.com/warrenmq/warren/dlq"
	"github.com/warrenmq/warren/middleware"
)

// invoicePaid is the event the examples deliver.
var invoicePaid = warren.Event{
	ID:          "0b6a3c1e-1f1d-4a57-9d36-2c2b8e0f6a10",
	Type:        "invoice.paid",
	EntityType:  "invoice",
	EntityID:    "inv-42",
	WorkspaceID: "acme",
	Payload:     warren.Payload{Data: json.RawMessage(`{"amount":1200}`)},
}

// newBilling builds the consumer as a service would; it never connects.
func newBilling(handle func(context.Context, *warren.Message) error) *consumer.BaseConsumer {
	c, err := consumer.New(consumer.Config{Name: "billing", MaxAttempts: 3})
	if err != nil {
		panic(err)
	}
	c.HandleFunc("invoice.", handle)
	return c
}

// A handler that returns nil has its message acked as done.
func ExampleDeliver_done() {
	c := newBilling(func(ctx context.Context, m *warren.Message) error { return nil })

	r := consumertest.Deliver(context.Background(), c, consumertest.Delivery{Event: invoicePaid})
	fmt.Println(r.Disposition, r.EventType, r.Queue == "")
	// Output: done invoice.paid true
}

// Middleware runs as in the consumer: a filter's skip is acked as skipped.
func ExampleDeliver_skip() {
	c := newBilling(func(ctx context.Context, m *warren.Message) error { return nil })
	c.Use(middleware.SkipInitiators(warren.InitiatorSystemPrefix))

	ev := invoicePaid
	ev.InitiatorType = warren.InitiatorSystemImport
	r := consumertest.Deliver(context.Background(), c, consumertest.Delivery{Event: ev})
	fmt.Println(r.Disposition)
	// Output: skipped
}

// With the dedup middleware, the second delivery of an event is acked as a
// duplicate, and the handler runs once.
func ExampleDeliver_duplicate() {
	calls := 0
	c := newBilling(func(ctx context.Context, m *warren.Message) error { calls++; return nil })
	store, err := memory.New(memory.Config{})
	if err != nil {
		log.Fatal(err)
	}
	c.Use(middleware.Dedup(store, middleware.DedupOptions{}))

	ctx := context.Background()
	first := consumertest.Deliver(ctx, c, consumertest.Delivery{Event: invoicePaid})
	again := consumertest.Deliver(ctx, c, consumertest.Delivery{Event: invoicePaid})
	fmt.Println(first.Disposition, again.Disposition, calls)
	// Output: done duplicate 1
}

// A transient failure goes to the retry tier of its attempt, with the
// attempt counted and the error recorded in the headers; the next delivery
// is attempt 3. A RetryAfter hint picks the smallest tier at least as long.
func ExampleDeliver_retry() {
	c := newBilling(func(ctx context.Context, m *warren.Message) error {
		if m.Event.EntityID == "inv-43" {
			return warren.RetryAfter(30*time.Second, errors.New("rate limited"))
		}
		return errors.New("payment service timed out")
	})
	ctx := context.Background()

	r := consumertest.Deliver(ctx, c, consumertest.Delivery{Event: invoicePaid, Attempt: 2})
	fmt.Println(r.Disposition, r.Queue, r.Delay)
	fmt.Println(r.Headers[dlq.HeaderAttempts], r.Headers[dlq.HeaderError])

	hinted := invoicePaid
	hinted.EntityID = "inv-43"
	r = consumertest.Deliver(ctx, c, consumertest.Delivery{Event: hinted})
	fmt.Println(r.Disposition, r.Queue)

	// The last attempt's failure is not retried: the message is dead,
	// class exhausted.
	r = consumertest.Deliver(ctx, c, consumertest.Delivery{Event: invoicePaid, Attempt: 3})
	fmt.Println(r.Disposition, r.Queue, r.Class)
	// Output:
	// retried billing.retry.10s 10s
	// 2 payment service timed out
	// retried billing.retry.1m
	// dead_lettered billing.dlq exhausted
}

// A permanent failure goes straight to the dead-letter queue, whose headers
// say why, where from and after how many attempts.
func ExampleDeliver_permanent() {
	c := newBilling(func(ctx context.Context, m *warren.Message) error {
		return warren.Permanent(errors.New("invoice currency not supported"))
	})

	r := consumertest.Deliver(context.Background(), c, consumertest.Delivery{Event: invoicePaid})
	fmt.Println(r.Disposition, r.Queue, r.Class)
	meta := dlq.ParseMetadata(r.Headers)
	fmt.Println(meta.Error, meta.Attempts, meta.OriginQueue, meta.Consumer)
	// Output:
	// dead_lettered billing.dlq permanent
	// invoice currency not supported 1 billing billing
}

// A body that is not a warren event never reaches a handler: it is
// dead-lettered with class undecodable.
func ExampleDeliver_undecodable() {
	calls := 0
	c := newBilling(func(ctx context.Context, m *warren.Message) error { calls++; return nil })

	r := consumertest.Deliver(context.Background(), c, consumertest.Delivery{Body: []byte(`{"event_type":`)})
	fmt.Println(r.Disposition, r.Queue, r.Class, calls)
	// Output: dead_lettered billing.dlq undecodable 0
}
