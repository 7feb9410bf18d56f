package main

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/consumer"
	"github.com/warrenmq/warren/consumer/consumertest"
	"github.com/warrenmq/warren/dedup/memory"
	dedupredis "github.com/warrenmq/warren/dedup/redis"
	"github.com/warrenmq/warren/internal/testenv"
)

// receipts records the receipts a service sent.
type receipts struct {
	mu   sync.Mutex
	sent map[string]int
}

func (r *receipts) send(order string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sent == nil {
		r.sent = map[string]int{}
	}
	r.sent[order]++
}

func (r *receipts) count(order string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sent[order]
}

// The handler test a service writes, with the test kit and no broker: a
// placed order gets one receipt, its redelivery is a duplicate, an event
// that breaks its contract or is of a version the service does not read
// goes to the DLQ, and another order event is skipped.
func TestHandlers(t *testing.T) {
	t.Parallel()
	var got receipts
	store, err := memory.New(memory.Config{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := service{Consumer: "orders-mailer", Sent: got.send}.consumer(store)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	placed := warren.Event{ID: "ev-1", Type: "order.placed", Version: "1", Payload: warren.Payload{Data: []byte(`{"id":"o-1","cents":100}`)}}
	broken := func(id, version, data string) warren.Event {
		return warren.Event{ID: id, Type: "order.placed", Version: version, Payload: warren.Payload{Data: []byte(data)}}
	}
	for _, tc := range []struct {
		ev   warren.Event
		want consumer.Disposition
	}{
		{placed, consumer.Done},
		{placed, consumer.Duplicate},
		{broken("ev-2", "1", `{}`), consumer.DeadLettered},                         // no id: breaks the contract
		{broken("ev-4", "1", `{"id":"o-2","cents":-1}`), consumer.DeadLettered},    // below the contract's minimum
		{broken("ev-5", "2", `{"id":"o-3","cents":100}`), consumer.DeadLettered},   // a version it does not read
		{broken("ev-6", "", `{"id":"o-4","cents":100}`), consumer.DeadLettered},    // no version at all
		{broken("ev-7", "1", `{"id":"o-5","cents":"100"}`), consumer.DeadLettered}, // cents as text
		{warren.Event{ID: "ev-3", Type: "order.shipped"}, consumer.Skipped},
	} {
		if r := consumertest.Deliver(ctx, c, consumertest.Delivery{Event: tc.ev}); r.Disposition != tc.want {
			t.Errorf("%s %s: %v, want %v", tc.ev.Type, tc.ev.ID, r.Disposition, tc.want)
		}
	}
	if n := got.count("o-1"); n != 1 {
		t.Errorf("%d receipts for o-1, want 1", n)
	}
	for _, order := range []string{"", "o-2", "o-3", "o-4", "o-5"} {
		if n := got.count(order); n != 0 {
			t.Errorf("%d receipts for %q, whose event the handler must not see", n, order)
		}
	}
}

// The service end to end on the real services: run as main runs it, on
// names of its own, it sends exactly one receipt for the order it placed,
// and stops when its context ends.
func TestServiceEndToEnd(t *testing.T) {
	t.Parallel()
	var got receipts
	s := service{
		DatabaseURL: testenv.DatabaseURL(t), AMQPURL: testenv.AMQPURL(t), RedisURL: testenv.RedisURL(t),
		Orders: testenv.Name(t, "orders"), Outbox: testenv.Name(t, "ob"), Exchange: testenv.Name(t, "ex"), Consumer: testenv.Name(t, "mailer"),
		Sent: got.send,
	}
	testenv.DropTables(t, s.Orders, s.Outbox, s.Outbox+"_migrations")
	testenv.CleanupExchanges(t, s.Exchange, s.Consumer+".dlx")
	testenv.CleanupQueues(t, s.Consumer, s.Consumer+".dlq", s.Consumer+".retry.1s", s.Consumer+".retry.10s", s.Consumer+".retry.1m", s.Consumer+".retry.10m")
	t.Cleanup(func() {
		testenv.DeleteRedisKeys(t, testenv.RedisClient(t, "orders-cleanup"), dedupredis.DefaultPrefix+"{"+s.Consumer)
	})

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.run(ctx, "o-1", 4200) }()
	testenv.WaitFor(t, 60*time.Second, "the receipt for o-1", func() bool { return got.count("o-1") > 0 })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("run after its context ended: %v, want context.Canceled", err)
	}
	if n := got.count("o-1"); n != 1 {
		t.Errorf("%d receipts for o-1, want exactly 1", n)
	}
}
