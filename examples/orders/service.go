package main

import (
	"cmp"
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/consumer"
	"github.com/warrenmq/warren/contract"
	"github.com/warrenmq/warren/dedup"
	dedupredis "github.com/warrenmq/warren/dedup/redis"
	"github.com/warrenmq/warren/middleware"
	"github.com/warrenmq/warren/outbox"
	"github.com/warrenmq/warren/relay"
)

// service is the example's settings: where the services are, the names
// of its tables, exchange and consumer, and what sending a receipt does.
type service struct {
	DatabaseURL, AMQPURL, RedisURL     string
	Orders, Outbox, Exchange, Consumer string
	Sent                               func(order string)
}

// run migrates, places one order and relays and consumes until ctx ends.
func (s service) run(ctx context.Context, order string, cents int) error {
	pool, err := pgxpool.New(ctx, s.DatabaseURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	// The outbox refuses, before commit, an event that breaks its contract.
	ob, err := outbox.Open(s.Outbox, outbox.Options{Check: Contracts.Check})
	if err != nil {
		return err
	}
	if _, err := ob.Migrate(ctx, pool); err != nil { // the outbox table, once
		return err
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+s.Orders+` (id text PRIMARY KEY, cents int NOT NULL)`); err != nil {
		return err
	}
	r, err := relay.New(relay.Config{Pool: pool, Table: s.Outbox, AMQPURL: s.AMQPURL, Exchange: s.Exchange})
	if err != nil {
		return err
	}
	opts, err := goredis.ParseURL(s.RedisURL)
	if err != nil {
		return err
	}
	rdb := goredis.NewClient(opts)
	defer rdb.Close()
	if err := rdb.Ping(ctx).Err(); err != nil { // fail now, not at the first event
		return fmt.Errorf("redis: %w", err)
	}
	store, err := dedupredis.New(rdb, dedupredis.Config{})
	if err != nil {
		return err
	}
	c, err := s.consumer(store)
	if err != nil {
		return err
	}
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	var wg sync.WaitGroup
	errs := make([]error, 2)
	wg.Go(func() { errs[0] = c.Run(ctx); stop(nil) }) // the service ends with its consumer
	// The consumer declares its queue when it starts: an event published
	// before that finds no queue bound, and the relay publishes it again
	// later. A deployed service's queue exists already.
	for !c.Health().Ready && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	wg.Go(func() { errs[1] = r.Run(ctx) }) // or run `warren relay run` beside the service
	if err := placeOrder(ctx, pool, ob, s.Orders, order, cents); err != nil {
		stop(err)
	}
	wg.Wait()
	return cmp.Or(errs[0], errs[1], context.Cause(ctx))
}

// placeOrder writes the order and its event in one transaction: both
// commit, or neither does.
func placeOrder(ctx context.Context, pool *pgxpool.Pool, ob *outbox.Table, orders, id string, cents int) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `INSERT INTO `+orders+` (id, cents) VALUES ($1, $2)`, id, cents); err != nil {
		return err
	}
	payload, err := warren.PayloadOf(OrderPlaced{ID: id, Cents: cents}, nil)
	if err != nil {
		return err
	}
	ev := warren.Event{ID: "order.placed:" + id, Type: "order.placed", Version: "1",
		EntityType: "order", EntityID: id, Payload: payload}
	if _, err := ob.Publish(ctx, tx, ev); err != nil { // checked against its contract
		return err
	}
	return tx.Commit(ctx)
}

// consumer is the service's consumer: every event once (dedup), receipts
// for placed orders, every other order event acked as not this service's.
func (s service) consumer(store dedup.Store) (*consumer.BaseConsumer, error) {
	c, err := consumer.New(consumer.Config{URL: s.AMQPURL, Name: s.Consumer, Exchange: s.Exchange})
	if err != nil {
		return nil, err
	}
	c.Use(middleware.Dedup(store, middleware.DedupOptions{}))
	// An order.placed of another version, or one that breaks its
	// contract, goes to the DLQ naming the field, never to the handler.
	read, err := Contracts.Reader(contract.Reads{Type: "order.placed", Version: "1"})
	if err != nil {
		return nil, err
	}
	c.Use(read)
	c.Handle("order.placed", warren.Typed(func(ctx context.Context, m *warren.Message, order OrderPlaced) error {
		s.Sent(order.ID) // an error here would be retried
		return nil
	})) // a route is a prefix
	c.HandleFunc("order.", func(context.Context, *warren.Message) error { return warren.Skip("not ours") })
	return c, nil
}
