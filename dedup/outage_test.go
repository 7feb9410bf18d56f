package dedup_test

import (
	"context"
	"log/slog"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/consumer"
	"github.com/warrenmq/warren/dedup"
	"github.com/warrenmq/warren/dedup/postgres"
	"github.com/warrenmq/warren/dedup/redis"
	"github.com/warrenmq/warren/internal/amqpx"
	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/middleware"
)

// outageConsumer runs a consumer on the shared broker whose handler sits
// behind Dedup on store, reporting to a Dependency the consumer lists. It
// records the attempt number of every run of the handler.
type outageConsumer struct {
	*consumer.BaseConsumer
	mu   sync.Mutex
	runs []int // Message.Attempt of each run
}

func (o *outageConsumer) attempts() []int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]int(nil), o.runs...)
}

func startOutageConsumer(t *testing.T, store dedup.Store, opts middleware.DedupOptions) *outageConsumer {
	t.Helper()
	health := warren.NewDependency("dedup")
	opts.Health = health
	exchange := testenv.Name(t, "ex")
	testenv.CleanupExchanges(t, exchange)
	c, err := consumer.New(consumer.Config{
		URL: testenv.AMQPURL(t), Name: testenv.Name(t, "c"), Exchange: exchange, Workers: 2,
		MaxAttempts:  2,
		RetryDelays:  []time.Duration{20 * time.Millisecond, 50 * time.Millisecond},
		Dependencies: []*warren.Dependency{health},
		Logger:       slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		t.Fatal(err)
	}
	testenv.CleanupQueues(t, c.Topology().Queues()...)
	testenv.CleanupExchanges(t, c.Topology().DLX)
	o := &outageConsumer{BaseConsumer: c}
	c.Use(middleware.Dedup(store, opts))
	c.HandleFunc("", func(_ context.Context, m *warren.Message) error {
		o.mu.Lock()
		o.runs = append(o.runs, m.Attempt)
		o.mu.Unlock()
		return nil
	})
	testenv.RunInBackground(t, c.Run)
	testenv.WaitFor(t, 15*time.Second, "the consumer to be ready", func() bool { return c.Health().Ready })
	return o
}

func publishEvent(t *testing.T, exchange, id string) {
	t.Helper()
	msg, err := amqpx.EventPublishing(warren.Event{ID: id, Type: "workitem.updated", InitiatorType: "USER"})
	if err != nil {
		t.Fatal(err)
	}
	pub, err := amqpx.NewPublisher(context.Background(), testenv.AMQPConn(t), 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := pub.Publish(context.Background(), exchange, "", msg); err != nil {
		t.Fatal(err)
	}
}

func dependencyDown(h consumer.Health) bool {
	return len(h.Dependencies) == 1 && !h.Dependencies[0].Up && h.Dependencies[0].Error != "" && !h.Ready
}

// Issue 13, defect 4. A Postgres store whose connections stop answering
// (the proxy forwards nothing: backends paused, a network that drops
// packets) must not hold the workers: each claim gives up after
// StoreTimeout, the message is deferred, and the consumer's health shows
// the store down. When the store answers again the message is handled,
// once, on its first attempt. Before the fix the claim ran on the
// handler's context, which has no deadline, and hung with health green.
func TestStalledPostgresStoreShowsInHealthAndHoldsNoWorker(t *testing.T) {
	t.Parallel()
	store, proxy := pgStoreBehindProxy(t, postgres.Config{})
	const storeTimeout = time.Second
	o := startOutageConsumer(t, store, middleware.DedupOptions{StoreTimeout: storeTimeout, UnavailableDelay: time.Millisecond})

	proxy.Stall(true)
	publishEvent(t, o.Config().Exchange, testenv.Name(t, "evt"))
	// Claims keep timing out: the message is deferred again and again, each
	// time after about StoreTimeout, rather than held by a hung claim.
	testenv.WaitFor(t, 60*time.Second, "claims on the stalled store to time out twice", func() bool {
		return o.Stats().Unavailable >= 2
	})
	if h := o.Health(); !dependencyDown(h) {
		t.Errorf("health while the store is stalled = %+v, want the dependency down and not ready", h)
	}
	if !o.Health().Alive {
		t.Error("a stalled store made the consumer not alive; a restart cannot fix a store")
	}

	proxy.Stall(false)
	testenv.WaitFor(t, 60*time.Second, "the message to be handled once the store answers", func() bool { return o.Stats().Done == 1 })
	testenv.WaitFor(t, 15*time.Second, "health to recover", func() bool { return o.Health().Ready })
	if runs := o.attempts(); len(runs) != 1 || runs[0] != 1 {
		t.Errorf("handler ran on attempts %v, want once, on attempt 1", runs)
	}
	if s := o.Stats(); s.Retried != 0 || s.DeadLettered != 0 {
		t.Errorf("stats %+v: a stalled store spent attempts", s)
	}
}

// Issue 13, defect 5. A Redis store that is away for longer than every
// retry tier together, MaxAttempts times over: the message is neither
// dead-lettered nor charged an attempt — it cycles through the tiers
// without spending one — and is handled exactly once, on attempt 1, when
// the store is back; meanwhile health and the counters show the outage.
// Before the fix each failed claim spent an attempt, and the message was
// dead-lettered as exhausted though its handler never ran.
func TestStoreDownLongerThanAllRetriesDeadLettersNothing(t *testing.T) {
	t.Parallel()
	rdb, proxy := testenv.RedisBehindProxy(t)
	prefix := testenv.Name(t, "dd") + ":"
	testenv.DeleteRedisKeysOnCleanup(t, prefix)
	store, err := redis.New(rdb, redis.Config{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	o := startOutageConsumer(t, store, middleware.DedupOptions{StoreTimeout: 5 * time.Second, UnavailableDelay: time.Millisecond})
	maxAttempts := o.Config().MaxAttempts

	proxy.SetUp(false)
	publishEvent(t, o.Config().Exchange, "evt-"+prefix)
	// Three times as many deliveries as MaxAttempts allows failures: on the
	// code before the fix the message is dead-lettered well before.
	testenv.WaitFor(t, 60*time.Second, "the message to come back 3×MaxAttempts times while the store is down", func() bool {
		s := o.Stats()
		return s.Received >= uint64(3*maxAttempts) || s.DeadLettered > 0
	})
	s := o.Stats()
	if s.DeadLettered != 0 || s.Retried != 0 {
		t.Fatalf("while the store was down: %d dead-lettered, %d retried (stats %+v); want only deferrals", s.DeadLettered, s.Retried, s)
	}
	// The two counters are bumped one after the other, while deferrals go
	// on: wait for a moment between two.
	testenv.WaitFor(t, 30*time.Second, "every deferral counted as unavailable", func() bool {
		s := o.Stats()
		return s.Unavailable > 0 && s.Unavailable == s.Deferred
	})
	if h := o.Health(); !dependencyDown(h) {
		t.Errorf("health while the store is down = %+v, want the dependency down and not ready", h)
	}
	if len(o.attempts()) != 0 {
		t.Fatal("the handler ran while the store was down")
	}

	proxy.SetUp(true)
	// InFlight falls after Done is counted.
	testenv.WaitFor(t, 60*time.Second, "the message to be handled once the store is back", func() bool {
		s := o.Stats()
		return s.Done == 1 && s.InFlight == 0
	})
	testenv.WaitFor(t, 15*time.Second, "health to recover", func() bool { return o.Health().Ready })
	if runs := o.attempts(); len(runs) != 1 || runs[0] != 1 {
		t.Errorf("handler ran on attempts %v, want once, on attempt 1 (no attempt spent by the outage)", runs)
	}
	if s := o.Stats(); s.DeadLettered != 0 || s.Retried != 0 || s.InFlight != 0 {
		t.Errorf("final stats %+v", s)
	}
}

// pgStoreBehindProxy returns a migrated store on a table of its own whose
// pool reaches the test Postgres through a proxy, so a test can stall it.
func pgStoreBehindProxy(t *testing.T, cfg postgres.Config) (*postgres.Store, *testenv.Proxy) {
	t.Helper()
	proxy := testenv.StartProxy(t, pgHostPort(t))
	pcfg, err := pgxpool.ParseConfig(proxy.URL(t, testenv.DatabaseURL(t)))
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), pcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	cfg.Table = testenv.Name(t, "dd")
	testenv.DropTables(t, cfg.Table)
	// Runs first: neither the drop nor the pool's close waits on a stall.
	t.Cleanup(func() { proxy.Stall(false) })
	store, err := postgres.New(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return store, proxy
}

func pgHostPort(t *testing.T) string {
	t.Helper()
	u, err := url.Parse(testenv.DatabaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	if u.Port() == "" {
		return u.Hostname() + ":5432"
	}
	return u.Host
}

func returning(err error) warren.Handler {
	return warren.HandlerFunc(func(context.Context, *warren.Message) error { return err })
}
