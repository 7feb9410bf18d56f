package dedup_test

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/consumer"
	"github.com/warrenmq/warren/dedup/postgres"
	"github.com/warrenmq/warren/internal/amqpx"
	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/middleware"
)

// The same event delivered 50 times at once to two consumers, each running
// as two replicas of eight workers on the real broker: each consumer's
// handler has its effect exactly once. In transactional mode the effect is
// a row written in the handler's transaction.
func TestSameEventFiftyTimesToReplicatedConsumers(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		if b.name == "memory" {
			continue // replicas are processes; memory cannot be shared between them
		}
		for _, transactional := range []bool{false, true} {
			if transactional && b.name != "postgres" {
				continue
			}
			name := b.name
			if transactional {
				name += "/transactional"
			}
			t.Run(name, func(t *testing.T) { runReplicated(t, b, transactional) })
		}
	}
}

func runReplicated(t *testing.T, b backend, transactional bool) {
	const copies, replicas, workers = 50, 2, 8
	exchange := testenv.Name(t, "ex")
	testenv.CleanupExchanges(t, exchange)
	effectsTable := testenv.Name(t, "fx")
	if transactional {
		testenv.DropTables(t, effectsTable)
		if _, err := testenv.PgPool(t).Exec(context.Background(), `CREATE TABLE `+pgx.Identifier{effectsTable}.Sanitize()+` (consumer text, event_id text)`); err != nil {
			t.Fatal(err)
		}
	}
	stores := b.replicas(t, 2*replicas)
	effects := map[string]*atomic.Int64{}
	var running []*consumer.BaseConsumer
	for ci, consumerName := range []string{testenv.Name(t, "a"), testenv.Name(t, "b")} {
		effects[consumerName] = &atomic.Int64{}
		for r := range replicas {
			c, err := consumer.New(consumer.Config{
				URL: testenv.AMQPURL(t), Name: consumerName, Exchange: exchange, Workers: workers,
				RetryDelays: []time.Duration{20 * time.Millisecond},
				Logger:      slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})),
			})
			if err != nil {
				t.Fatal(err)
			}
			if r == 0 {
				testenv.CleanupQueues(t, c.Topology().Queues()...)
				testenv.CleanupExchanges(t, c.Topology().DLX)
			}
			c.Use(middleware.Dedup(stores[ci*replicas+r], middleware.DedupOptions{
				Transactional: transactional, BusyDelay: 20 * time.Millisecond, Lease: time.Minute,
			}))
			counter := effects[consumerName]
			c.HandleFunc("", func(ctx context.Context, m *warren.Message) error {
				if transactional {
					tx, _ := postgres.Tx(ctx)
					if _, err := tx.Exec(ctx, `INSERT INTO `+pgx.Identifier{effectsTable}.Sanitize()+` VALUES ($1, $2)`, m.Consumer, m.Event.ID); err != nil {
						return err
					}
				}
				counter.Add(1)
				// Hold the lease a moment so the other deliveries meet it.
				select {
				case <-time.After(50 * time.Millisecond):
				case <-ctx.Done():
				}
				return nil
			})
			running = append(running, c)
			testenv.RunInBackground(t, c.Run)
		}
	}
	testenv.WaitFor(t, 60*time.Second, "every replica to consume", func() bool {
		for _, c := range running {
			if !c.Health().Ready {
				return false
			}
		}
		return true
	})

	msg, err := amqpx.EventPublishing(warren.Event{ID: "evt-" + exchange, Type: "workitem.updated", InitiatorType: "USER"})
	if err != nil {
		t.Fatal(err)
	}
	pub, err := amqpx.NewPublisher(context.Background(), testenv.AMQPConn(t), copies)
	if err != nil {
		t.Fatal(err)
	}
	for range copies {
		if err := pub.Publish(context.Background(), exchange, "", msg); err != nil {
			t.Fatal(err)
		}
	}
	// Every copy ends acked, as done or duplicate, once deferrals came back.
	settled := func(name string) uint64 {
		var n uint64
		for _, c := range running {
			if c.Config().Name == name {
				s := c.Stats()
				n += s.Done + s.Duplicates
			}
		}
		return n
	}
	for name := range effects {
		testenv.WaitFor(t, 60*time.Second, "all copies settled for "+name, func() bool { return settled(name) == copies })
	}
	for name, n := range effects {
		if n.Load() != 1 {
			t.Errorf("consumer %s: handler's effect happened %d times, want 1", name, n.Load())
		}
	}
	if transactional {
		var rows int
		if err := testenv.PgPool(t).QueryRow(context.Background(), `SELECT count(*) FROM `+pgx.Identifier{effectsTable}.Sanitize()).Scan(&rows); err != nil {
			t.Fatal(err)
		}
		if rows != 2 {
			t.Errorf("%d effect rows committed, want one per consumer", rows)
		}
	}
	var deferred uint64
	for _, c := range running {
		deferred += c.Stats().Deferred
	}
	t.Logf("%d copies × 2 consumers: %d deliveries deferred while another replica held the lease", copies, deferred)
}
