package cdc_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/relay/cdc"
)

// env is one test's outbox table, slot, exchange and queue, all unique to
// the test and removed when it ends.
type env struct {
	t        *testing.T
	ob       *testenv.OutboxTable
	slot     string
	exchange string
	queue    string
	ch       *amqp.Channel
}

func newEnv(t *testing.T) *env {
	t.Helper()
	return newEnvOn(t, testenv.NewOutboxTable(t))
}

// newEnvOn is newEnv with the outbox table ob (one on a private server).
func newEnvOn(t *testing.T, ob *testenv.OutboxTable) *env {
	t.Helper()
	table := ob.Table.Name()
	// Before any relay runs, so that the slot is dropped after they stopped.
	slot := testenv.CDCSlot(t, ob.Pool, table)
	e := &env{t: t, ob: ob, slot: slot, exchange: testenv.Name(t, "ex"), queue: testenv.Name(t, "q")}
	testenv.CleanupExchanges(t, e.exchange)
	testenv.CleanupQueues(t, e.queue)
	e.ch = testenv.Channel(t)
	if err := e.ch.ExchangeDeclare(e.exchange, "fanout", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	return e
}

// bindQueue declares the test's queue and binds it to the exchange.
func (e *env) bindQueue() {
	e.t.Helper()
	e.bindQueueWith(nil)
}

// bindQueueWith is bindQueue with the queue's arguments args (a length
// limit, an overflow behaviour).
func (e *env) bindQueueWith(args amqp.Table) {
	e.t.Helper()
	if _, err := e.ch.QueueDeclare(e.queue, true, false, false, false, args); err != nil {
		e.t.Fatal(err)
	}
	if err := e.ch.QueueBind(e.queue, "", e.exchange, false, nil); err != nil {
		e.t.Fatal(err)
	}
}

// config is a relay of the test's table and exchange.
func (e *env) config() cdc.Config {
	return cdc.Config{
		Pool:     e.ob.Pool,
		AMQPURL:  testenv.AMQPURL(e.t),
		Exchange: e.exchange,
		Table:    e.ob.Table.Name(),
		Name:     testenv.Name(e.t, "relay"),
		Logger:   slog.New(slog.NewTextHandler(testWriter{e.t}, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
}

// start runs a relay with cfg until the test ends, or until the returned
// stop is called.
func (e *env) start(cfg cdc.Config) (*cdc.Relay, func()) {
	e.t.Helper()
	r, err := cdc.New(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				e.t.Errorf("run: %v", err)
			}
		})
	}
	e.t.Cleanup(stop)
	return r, stop
}

// receive consumes the queue until it has seen every id of want at least
// once, and returns the message ids in the order they arrived.
func (e *env) receive(want []string, timeout time.Duration) []string {
	e.t.Helper()
	ch := testenv.Channel(e.t)
	defer ch.Close()
	deliveries, err := ch.Consume(e.queue, "", true, false, false, false, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	missing := make(map[string]bool, len(want))
	for _, id := range want {
		missing[id] = true
	}
	var got []string
	deadline := time.After(timeout)
	for len(missing) > 0 {
		select {
		case d := <-deliveries:
			got = append(got, d.MessageId)
			delete(missing, d.MessageId)
		case <-deadline:
			e.t.Fatalf("after %v, %d of %d events not received", timeout, len(missing), len(want))
		}
	}
	return got
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}
