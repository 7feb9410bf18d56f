package dedup_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/dedup"
	"github.com/warrenmq/warren/dedup/postgres"
	"github.com/warrenmq/warren/dedup/redis"
	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/middleware"
)

// A backend opens n stores on one shared namespace, each on its own
// connection pool, the way n replicas of a consumer would.
type backend struct {
	name     string
	replicas func(t *testing.T, n int) []dedup.Store
}

var backends = []backend{
	{"memory", func(t *testing.T, n int) []dedup.Store {
		// One process's memory: the replicas share the store.
		s := testenv.MemoryStore(t)
		stores := make([]dedup.Store, n)
		for i := range stores {
			stores[i] = s
		}
		return stores
	}},
	{"postgres", func(t *testing.T, n int) []dedup.Store {
		table := testenv.Name(t, "dd")
		stores := make([]dedup.Store, n)
		for i := range stores {
			pool := testenv.PgPool(t)
			s, err := postgres.New(pool, postgres.Config{Table: table})
			if err != nil {
				t.Fatal(err)
			}
			if i == 0 {
				testenv.DropTables(t, table)
				if err := s.Migrate(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			stores[i] = s
		}
		return stores
	}},
	{"redis", func(t *testing.T, n int) []dedup.Store {
		prefix := testenv.Name(t, "dd") + ":"
		testenv.DeleteRedisKeysOnCleanup(t, prefix)
		stores := make([]dedup.Store, n)
		for i := range stores {
			s, err := redis.New(testenv.RedisClient(t, fmt.Sprintf("dedup-replica-%d", i)), redis.Config{Prefix: prefix})
			if err != nil {
				t.Fatal(err)
			}
			stores[i] = s
		}
		return stores
	}},
}

func forEachBackend(t *testing.T, test func(t *testing.T, b backend)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			test(t, b)
		})
	}
}

func delivery(consumer, eventID string, attempt int) *warren.Message {
	return &warren.Message{
		Event:    warren.Event{ID: eventID, Type: "workitem.updated"},
		Consumer: consumer, Attempt: attempt, MaxAttempts: 5,
	}
}

func outcomeOf(err error) warren.Outcome {
	o, _ := warren.Classify(err)
	return o
}

// The same event is delivered 50 times to each of two consumers, at once,
// to 2 replicas × 8 workers. Each consumer's handler must run exactly once.
//
// The handler that wins the claim holds its lease until every other
// first delivery has been answered, so all of them meet the live lease
// (deferred, not duplicate and not run); their redeliveries, which a
// consumer sends after the busy delay, then meet the done key.
func TestConcurrentDeliveriesRunOncePerConsumer(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		const replicas, workers, perConsumer = 2, 8, 50
		consumers := []string{"webhook", "automation"}
		total := perConsumer * len(consumers)

		var (
			mu       sync.Mutex
			runs     = map[string]int{}
			outcomes = map[string]map[warren.Outcome]int{}
			answered atomic.Int32
			others   = make(chan struct{}) // closed when every delivery but the winners' is answered
		)
		effect := warren.HandlerFunc(func(ctx context.Context, m *warren.Message) error {
			mu.Lock()
			runs[m.Consumer]++
			mu.Unlock()
			select {
			case <-others:
				return nil
			case <-time.After(60 * time.Second):
				return errors.New("the other deliveries were never answered")
			}
		})
		record := func(m *warren.Message, err error) warren.Outcome {
			o := outcomeOf(err)
			mu.Lock()
			if outcomes[m.Consumer] == nil {
				outcomes[m.Consumer] = map[warren.Outcome]int{}
			}
			outcomes[m.Consumer][o]++
			mu.Unlock()
			if o != warren.OutcomeDone && int(answered.Add(1)) == total-len(consumers) {
				close(others)
			}
			return o
		}

		stores := b.replicas(t, replicas)
		run := func(queue []*warren.Message) (deferred []*warren.Message) {
			work := make(chan *warren.Message, len(queue))
			for _, m := range queue {
				work <- m
			}
			close(work)
			var wg sync.WaitGroup
			var deferMu sync.Mutex
			for _, store := range stores {
				h := middleware.Dedup(store, middleware.DedupOptions{})(effect)
				for range workers {
					wg.Go(func() {
						for m := range work {
							if record(m, h.Handle(context.Background(), m)) == warren.OutcomeDeferred {
								deferMu.Lock()
								deferred = append(deferred, m)
								deferMu.Unlock()
							}
						}
					})
				}
			}
			wg.Wait()
			return deferred
		}

		var first []*warren.Message
		for i := range perConsumer {
			for _, c := range consumers {
				first = append(first, delivery(c, "evt-1", 1+i%3))
			}
		}
		deferred := run(first)
		if len(deferred) != total-len(consumers) {
			t.Fatalf("first deliveries: %v; want 1 done and %d deferred per consumer", outcomes, perConsumer-1)
		}
		run(deferred) // the busy delay has passed; the key is done now
		for _, c := range consumers {
			want := map[warren.Outcome]int{warren.OutcomeDone: 1, warren.OutcomeDeferred: perConsumer - 1, warren.OutcomeDuplicate: perConsumer - 1}
			if got := outcomes[c]; fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("%s outcomes = %v, want %v", c, got, want)
			}
			if runs[c] != 1 {
				t.Errorf("%s handler ran %d times, want exactly 1", c, runs[c])
			}
		}
	})
}

// A handler that fails on its first attempt releases the key, so the retry
// — here on the other replica — runs it instead of taking it for a
// duplicate.
func TestFailedAttemptIsRetriedNotDuplicate(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		stores := b.replicas(t, 2)
		var calls, effects int
		effect := warren.HandlerFunc(func(ctx context.Context, m *warren.Message) error {
			calls++
			if m.Attempt == 1 {
				return errors.New("downstream returned 503")
			}
			effects++
			return nil
		})
		first := middleware.Dedup(stores[0], middleware.DedupOptions{})(effect)
		second := middleware.Dedup(stores[1], middleware.DedupOptions{})(effect)

		if err := first.Handle(context.Background(), delivery("webhook", "evt-2", 1)); outcomeOf(err) != warren.OutcomeRetry || err.Error() != "downstream returned 503" {
			t.Fatalf("failed attempt = %v (%v); want the handler's error, unchanged, as a retry", outcomeOf(err), err)
		}
		if err := second.Handle(context.Background(), delivery("webhook", "evt-2", 2)); err != nil {
			t.Fatalf("retry = %v (%v); want it handled", outcomeOf(err), err)
		}
		if err := first.Handle(context.Background(), delivery("webhook", "evt-2", 2)); outcomeOf(err) != warren.OutcomeDuplicate {
			t.Fatalf("delivery after the successful retry = %v (%v); want a duplicate", outcomeOf(err), err)
		}
		if calls != 2 || effects != 1 {
			t.Errorf("handler called %d times with %d effects; want 2 calls, 1 effect", calls, effects)
		}
	})
}

// A worker claims the event and dies: it never completes or releases. Until
// its lease ends, other deliveries are deferred; after it, another replica
// handles the event.
func TestDeadClaimersLeaseIsTakenOver(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		const lease = 3 * time.Second
		stores := b.replicas(t, 2)
		start := time.Now()
		if c, err := stores[0].Claim(context.Background(), "webhook:evt-3", lease); err != nil || c.Result != dedup.Acquired {
			t.Fatalf("the doomed worker's claim = %+v, %v", c, err)
		}
		// The doomed worker is gone; nothing settles its claim.

		runs := 0
		h := middleware.Dedup(stores[1], middleware.DedupOptions{Lease: time.Minute})(warren.HandlerFunc(func(context.Context, *warren.Message) error {
			runs++
			return nil
		}))
		err := h.Handle(context.Background(), delivery("webhook", "evt-3", 1))
		// Only a delivery that ended before the lease could have ended is
		// known to have run inside it; a busy machine may get there later.
		o, delay := warren.Classify(err)
		if time.Since(start) < lease && (o != warren.OutcomeDeferred || delay != middleware.DefaultBusyDelay) {
			t.Fatalf("delivery during the dead worker's lease = %v after %v (%v); want deferred by the busy delay", o, delay, err)
		}
		if o != warren.OutcomeDone {
			testenv.HandleUntil(t, h, delivery("webhook", "evt-3", 1), warren.OutcomeDone, warren.OutcomeDeferred)
		}
		if elapsed := time.Since(start); elapsed < lease {
			t.Errorf("lease of %v taken over after %v", lease, elapsed)
		}
		if runs != 1 {
			t.Errorf("handler ran %d times, want 1", runs)
		}
	})
}
