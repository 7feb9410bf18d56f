package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"
	goredis "github.com/redis/go-redis/v9"

	"github.com/warrenmq/warren/consumer"
	"github.com/warrenmq/warren/dedup/postgres"
	"github.com/warrenmq/warren/dedup/redis"
	"github.com/warrenmq/warren/middleware"
)

// leaseWhy is the cost a lease pays over a flag, for the report.
const leaseWhy = "a lease costs two writes per message, a claim before the handler and a completion after it, where the raw flag costs one; " +
	"with 16 workers every message waits for two round trips in a row. The store's batching shares those round trips (and, on Postgres, " +
	"the commits) between the workers, but cannot shorten the chain, so the result turns on how busy the machine is: the busier, " +
	"the more the raw client's extra system calls and commits cost it (docs/adr/016-dedup-batching.md)."

// dedupRetention is how long both sides keep a key. The keys are deleted
// after each measurement anyway; a retention bounds what a killed run
// leaves behind.
const dedupRetention = time.Hour

// poolConns is the Postgres pool size of both sides: one connection per
// concurrent handler, so that no raw variant waits for a connection.
const poolConns = workers

func redisDedupScenario() scenario {
	return scenario{
		name: "consume + redis dedup",
		about: fmt.Sprintf("Drain a backlog with one Redis round trip of deduplication per message before its ack, prefetch %d, %d workers. "+
			"Raw variants send `SET key 1 NX PX` with go-redis, then ack (a flag, not a lease: a handler failure after it would lose the event). "+
			"warren is a BaseConsumer at its defaults with `middleware.Dedup` on the `dedup/redis` store, whose lease costs a claim "+
			"before the handler and a completion after it. Watermill is the consume scenario's router with %d handlers and its "+
			"`middleware.Deduplicator` keyed by the event id, on a Redis key repository the bench implements (Watermill ships none): "+
			"one `SET NX PX` per message, the raw variants' flag.", prefetch, workers, workers),
		metrics: []metric{{name: throughput.name, target: target{ratio: 1, peerRatio: 1.3}}},
		variants: []variant{
			{name: "raw: 1 channel, SET NX then ack", baseline: true, run: rawConsume(1, 1, rawRedisSetNX)},
			{name: "raw: 16 channels, SET NX then ack", baseline: true, run: rawConsume(16, 1, rawRedisSetNX)},
			{name: "watermill: router, 16 handlers, Deduplicator on redis", peer: true, run: watermillConsume(workers, true)},
			{name: "warren: Dedup, redis store", run: warrenConsumeWith(nil, warrenRedisDedup),
				why: leaseWhy},
		},
	}
}

func postgresDedupScenario() scenario {
	return scenario{
		name: "consume + postgres dedup",
		about: fmt.Sprintf("Drain a backlog with a Postgres write of deduplication per message before its ack, prefetch %d, %d workers, "+
			"a pool of %d connections on both sides. Raw variants run `INSERT … ON CONFLICT DO NOTHING` on a one-column table with pgx, then ack. "+
			"warren is a BaseConsumer at its defaults with `middleware.Dedup` on the `dedup/postgres` store (claim before the handler, "+
			"completion after it); in transactional mode the completion is written in a transaction the handler runs in, "+
			"which commits once per message.", prefetch, workers, poolConns),
		metrics: []metric{{name: throughput.name, target: target{ratio: 1}}},
		variants: []variant{
			{name: "raw: 1 channel, INSERT then ack", baseline: true, run: rawConsume(1, 1, rawPostgresInsert)},
			{name: "raw: 16 channels, INSERT then ack", baseline: true, run: rawConsume(16, 1, rawPostgresInsert)},
			{name: "warren: Dedup, postgres store", run: warrenConsumeWith(nil, warrenPostgresDedup(false)),
				why: leaseWhy},
			{name: "warren: Dedup, postgres store, transactional", run: warrenConsumeWith(nil, warrenPostgresDedup(true)),
				// Issue 17: a transaction per message is the price of
				// exactly-once effects; it must keep three quarters of raw.
				throughputTarget: &target{ratio: 0.75},
				why: "the done-mark commits in the handler's own transaction, so every message pays a transaction of its own " +
					"that no batching can share: the batched claim's round trip and commit, then BEGIN, then the done-mark and the COMMIT " +
					"pipelined in one round trip with its WAL flush, where the raw INSERT is one round trip and one flush; " +
					"that is the price of exactly-once database effects."},
		},
	}
}

// rawRedisSetNX marks each event with one SET NX PX under a prefix of the
// measurement's own.
func rawRedisSetNX(ctx context.Context, e *env) (perMessage, func(), error) {
	rdb, err := redisClient(e)
	if err != nil {
		return nil, nil, err
	}
	prefix := uniqueName("raw") + ":"
	work := func(ctx context.Context, d *amqp.Delivery) error {
		return rdb.SetNX(ctx, prefix+d.MessageId, "1", dedupRetention).Err()
	}
	return work, func() { deleteRedisKeys(rdb, prefix); rdb.Close() }, nil
}

// warrenRedisDedup installs Dedup on a Redis store at its defaults, under
// a prefix of the measurement's own.
func warrenRedisDedup(ctx context.Context, e *env, c *consumer.BaseConsumer) (func(), error) {
	rdb, err := redisClient(e)
	if err != nil {
		return nil, err
	}
	prefix := uniqueName("warren") + ":"
	store, err := redis.New(rdb, redis.Config{Prefix: prefix, Retention: dedupRetention})
	if err != nil {
		rdb.Close()
		return nil, err
	}
	c.Use(middleware.Dedup(store, middleware.DedupOptions{Logger: discardLogger}))
	return func() { deleteRedisKeys(rdb, prefix); rdb.Close() }, nil
}

func redisClient(e *env) (*goredis.Client, error) {
	opts, err := goredis.ParseURL(e.redisURL)
	if err != nil {
		return nil, fmt.Errorf("REDIS_URL: %w", err)
	}
	opts.ClientName = "warren-bench"
	return goredis.NewClient(opts), nil
}

// deleteRedisKeys removes a measurement's keys; the prefix comes from
// uniqueName and holds no glob characters.
func deleteRedisKeys(rdb *goredis.Client, prefix string) {
	ctx := context.Background()
	iter := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	var batch []string
	for iter.Next(ctx) {
		if batch = append(batch, iter.Val()); len(batch) == 1000 {
			rdb.Unlink(ctx, batch...)
			batch = batch[:0]
		}
	}
	if len(batch) > 0 {
		rdb.Unlink(ctx, batch...)
	}
}

// rawPostgresInsert marks each event with one INSERT … ON CONFLICT DO
// NOTHING into a table of the measurement's own.
func rawPostgresInsert(ctx context.Context, e *env) (perMessage, func(), error) {
	pool, err := pgPool(ctx, e)
	if err != nil {
		return nil, nil, err
	}
	table := pgx.Identifier{uniqueName("raw")}.Sanitize()
	if _, err := pool.Exec(ctx, `CREATE TABLE `+table+` (key text PRIMARY KEY)`); err != nil {
		pool.Close()
		return nil, nil, err
	}
	insert := `INSERT INTO ` + table + ` (key) VALUES ($1) ON CONFLICT DO NOTHING`
	work := func(ctx context.Context, d *amqp.Delivery) error {
		_, err := pool.Exec(ctx, insert, d.MessageId)
		return err
	}
	return work, func() { dropTable(pool, table) }, nil
}

// warrenPostgresDedup installs Dedup on a Postgres store at its defaults,
// with a table of the measurement's own.
func warrenPostgresDedup(transactional bool) warrenSetup {
	return func(ctx context.Context, e *env, c *consumer.BaseConsumer) (func(), error) {
		pool, err := pgPool(ctx, e)
		if err != nil {
			return nil, err
		}
		name := uniqueName("warren")
		store, err := postgres.New(pool, postgres.Config{Table: name, Retention: dedupRetention})
		if err == nil {
			err = store.Migrate(ctx)
		}
		if err != nil {
			pool.Close()
			return nil, err
		}
		c.Use(middleware.Dedup(store, middleware.DedupOptions{Transactional: transactional, Logger: discardLogger}))
		return func() { dropTable(pool, pgx.Identifier{name}.Sanitize()) }, nil
	}
}

func pgPool(ctx context.Context, e *env) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(e.databaseURL)
	if err != nil {
		return nil, fmt.Errorf("DATABASE_URL: %w", err)
	}
	cfg.MaxConns = poolConns
	cfg.ConnConfig.RuntimeParams["application_name"] = "warren-bench"
	if e.pgTracer != nil {
		cfg.ConnConfig.Tracer = e.pgTracer
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, errors.Join(errors.New("postgres unreachable"), err)
	}
	return pool, nil
}

// dropTable drops a measurement's table and closes its pool.
func dropTable(pool *pgxpool.Pool, table string) {
	pool.Exec(context.Background(), `DROP TABLE IF EXISTS `+table)
	pool.Close()
}
