package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"
	goredis "github.com/redis/go-redis/v9"
)

// Watermill is the peer the bench measures warren against: what a Go team
// would pick instead of warren. Each peer variant is configured the way
// Watermill's documentation recommends for throughput, on the same
// broker, database and events as the raw and warren variants.

// watermillLogger keeps Watermill's per-message logging out of the figures.
var watermillLogger = watermill.NopLogger{}

// idMarshaler is watermill-amqp's DefaultMarshaler that takes a message's
// UUID from its AMQP message_id, where every warren producer (and Plane)
// puts the event id. The backlog carries no Watermill UUID header, and the
// Deduplicator's key must be the event id for it to do what the raw
// variants' SET NX does.
type idMarshaler struct{ wamqp.DefaultMarshaler }

func (m idMarshaler) Unmarshal(d amqp.Delivery) (*message.Message, error) {
	msg, err := m.DefaultMarshaler.Unmarshal(d)
	if err != nil {
		return nil, err
	}
	msg.UUID = d.MessageId
	return msg, nil
}

// watermillConsume drains the backlog with a Watermill router whose
// handlers each subscribe to the backlog queue through watermill-amqp: a
// handler is one AMQP channel and consumer, with prefetch as warren's,
// that handles its messages one at a time and acks each, so handlers is
// Watermill's concurrency. With dedup, the router runs the Deduplicator
// middleware on a Redis key repository.
func watermillConsume(handlers int, dedup bool) func(ctx context.Context, e *env) (figures, error) {
	return func(ctx context.Context, e *env) (figures, error) {
		var mw message.HandlerMiddleware
		if dedup {
			rdb, err := redisClient(e)
			if err != nil {
				return nil, err
			}
			prefix := uniqueName("watermill") + ":"
			defer func() { deleteRedisKeys(rdb, prefix); rdb.Close() }()
			d := &middleware.Deduplicator{
				KeyFactory: func(m *message.Message) (string, error) { return m.UUID, nil },
				Repository: &redisKeyRepository{rdb: rdb, prefix: prefix, ttl: dedupRetention},
			}
			mw = d.Middleware
		}
		b, err := newBacklog(ctx, e, uniqueName("watermill"), nil)
		if err != nil {
			return nil, err
		}
		defer b.close()

		// The durable queue config of watermill-amqp, naming the backlog
		// queue instead of one derived from the topic.
		cfg := wamqp.NewDurableQueueConfig(e.amqpURL)
		cfg.Marshaler = idMarshaler{}
		cfg.Queue.GenerateName = wamqp.GenerateQueueNameConstant(b.queue)
		cfg.Consume.Qos.PrefetchCount = prefetch
		sub, err := wamqp.NewSubscriber(cfg, watermillLogger)
		if err != nil {
			return nil, err
		}
		defer sub.Close()
		router, err := message.NewRouter(message.RouterConfig{}, watermillLogger)
		if err != nil {
			return nil, err
		}
		if mw != nil {
			router.AddMiddleware(mw)
		}
		var handled atomic.Int64
		done := make(chan struct{})
		var once sync.Once
		for i := range handlers {
			router.AddConsumerHandler(fmt.Sprintf("bench-%d", i), b.queue, sub, func(*message.Message) error {
				if handled.Add(1) == int64(e.messages) {
					once.Do(func() { close(done) })
				}
				return nil
			})
		}
		runCtx, cancel := context.WithCancel(ctx)
		defer cancel()
		errc := make(chan error, 1)
		begin := time.Now()
		go func() { errc <- router.Run(runCtx) }()
		select {
		case <-done:
		case err := <-errc:
			return nil, fmt.Errorf("watermill router stopped: %v", err)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		elapsed := time.Since(begin)
		cancel()
		if err := <-errc; err != nil {
			return nil, err
		}
		return rate(e.messages, elapsed), nil
	}
}

// redisKeyRepository is a Watermill ExpiringKeyRepository on Redis, which
// Watermill does not ship (its Deduplicator's doc asks for one): one
// SET NX with a TTL per key, the same flag the raw variants set. A key is
// a duplicate when it was already set.
type redisKeyRepository struct {
	rdb    *goredis.Client
	prefix string
	ttl    time.Duration
}

func (r *redisKeyRepository) IsDuplicate(ctx context.Context, key string) (bool, error) {
	set, err := r.rdb.SetNX(ctx, r.prefix+key, "1", r.ttl).Result()
	return !set, err
}

// watermillForwarderBatch is how many rows the Forwarder's SQL subscriber
// reads per query: the raw loop's claim, where watermill-sql's default is
// 100 (its docs: a higher value reads faster at the price of more
// redeliveries after a crash).
const watermillForwarderBatch = rawClaimBatch

// watermillRelay drains an outbox with the Forwarder of Watermill's
// components: a router handler reading the outbox table through a
// watermill-sql subscriber on Postgres (the queue schema, rows deleted on
// ack, as a relay deletes what it published) and publishing each event to
// the bench's exchange through watermill-amqp with publisher confirms. Its
// table has its own format, so it is filled through the Forwarder's
// publisher over the SQL publisher, 1000 events to a transaction like the
// other relay variants, before the clock starts.
func watermillRelay(ctx context.Context, e *env) (figures, error) {
	ob, err := newOutboxBench(ctx, e, 1000)
	if err != nil {
		return nil, err
	}
	defer ob.close()
	topic := uniqueName("watermill_outbox")
	table := pgx.Identifier{topic}.Sanitize()
	defer ob.pool.Exec(context.Background(), `DROP TABLE IF EXISTS `+table)
	tableName := func(string) string { return table }
	schema := wsql.PostgreSQLQueueSchema{GenerateMessagesTableName: tableName, SubscribeBatchSize: watermillForwarderBatch}
	sub, err := wsql.NewSubscriber(wsql.BeginnerFromPgx(ob.pool), wsql.SubscriberConfig{
		SchemaAdapter:    schema,
		OffsetsAdapter:   wsql.PostgreSQLQueueOffsetsAdapter{DeleteOnAck: true, GenerateMessagesTableName: tableName},
		InitializeSchema: true,
	}, watermillLogger)
	if err != nil {
		return nil, err
	}
	defer sub.Close()
	if err := sub.SubscribeInitialize(topic); err != nil {
		return nil, err
	}
	if err := fillWatermillOutbox(ctx, ob, schema, topic, e.messages); err != nil {
		return nil, err
	}

	cfg := wamqp.NewDurablePubSubConfig(e.amqpURL, nil)
	cfg.Exchange.GenerateName = wamqp.GenerateExchangeNameConstant(ob.exchange)
	cfg.Exchange.Type = amqp.ExchangeFanout
	cfg.Publish.Mandatory = true
	// Confirms, or a row is deleted before the broker has its message; one
	// pooled channel, as the Forwarder publishes one message at a time (0
	// would open and close a channel per message).
	cfg.Publish.ConfirmDelivery = true
	cfg.Publish.ChannelPoolSize = 1
	pub, err := wamqp.NewPublisher(cfg, watermillLogger)
	if err != nil {
		return nil, err
	}
	defer pub.Close()
	fwd, err := forwarder.NewForwarder(sub, pub, watermillLogger, forwarder.Config{ForwarderTopic: topic})
	if err != nil {
		return nil, err
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	errc := make(chan error, 1)
	begin := time.Now()
	go func() { errc <- fwd.Run(runCtx) }()
	// As for warren's relay: no "backlog empty" signal, so look every 5ms
	// whether a row is left (the subscriber deletes a row once its
	// message is confirmed).
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-errc:
			return nil, fmt.Errorf("forwarder stopped: %v", err)
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-tick.C:
		}
		var more bool
		if err := ob.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM `+table+`)`).Scan(&more); err != nil {
			return nil, err
		}
		if !more {
			break
		}
	}
	elapsed := time.Since(begin)
	stop()
	if err := <-errc; err != nil {
		return nil, err
	}
	// Watermill ignores returned (unroutable) messages, and a confirm
	// follows a return: a wrong exchange would empty the table and deliver
	// nothing. The queue keeps the last 1000 messages; it must hold them.
	if err := expectQueued(ob, min(e.messages, 1000)); err != nil {
		return nil, err
	}
	return rate(e.messages, elapsed), nil
}

// expectQueued checks that the outbox bench's queue holds want messages.
func expectQueued(ob *outboxBench, want int) error {
	ch, err := ob.conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	q, err := ch.QueueDeclarePassive(ob.queue, true, false, false, false, amqp.Table{"x-max-length": int64(1000)})
	if err != nil {
		return err
	}
	if q.Messages != want {
		return fmt.Errorf("the forwarder emptied its table but the queue holds %d messages, want %d", q.Messages, want)
	}
	return nil
}

// fillWatermillOutbox writes n events to a Watermill outbox table through
// the Forwarder's publisher over watermill-sql's, 1000 to a transaction.
func fillWatermillOutbox(ctx context.Context, ob *outboxBench, schema wsql.SchemaAdapter, topic string, n int) error {
	for start := 0; start < n; start += 1000 {
		msgs := make([]*message.Message, 0, 1000)
		for i := start; i < min(start+1000, n); i++ {
			ev := sampleEvent(i)
			body, err := ev.MarshalJSON()
			if err != nil {
				return err
			}
			msgs = append(msgs, message.NewMessage(ev.ID, body))
		}
		err := pgx.BeginFunc(ctx, ob.pool, func(tx pgx.Tx) error {
			p, err := wsql.NewPublisher(wsql.TxFromPgx(tx), wsql.PublisherConfig{SchemaAdapter: schema}, watermillLogger)
			if err != nil {
				return err
			}
			// The destination topic names nothing: the AMQP publisher's
			// exchange is a constant, the bench's fanout exchange.
			return forwarder.NewPublisher(p, forwarder.PublisherConfig{ForwarderTopic: topic}).Publish("events", msgs...)
		})
		if err != nil {
			return err
		}
	}
	return nil
}
