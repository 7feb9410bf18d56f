package dedup_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/dedup/redis"
	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/middleware"
)

// Review finding 1B. One claim that timed out in a quiet period leaves the
// store down only for the dependency's lapse: with no message left to ask
// the store, nothing else would report it, and before the fix the consumer
// stayed unready until the next message, however long the store had been
// back.
func TestStoreDownLapsesWithoutReports(t *testing.T) {
	t.Parallel()
	rdb, proxy := testenv.RedisBehindProxy(t)
	prefix := testenv.Name(t, "dd") + ":"
	testenv.DeleteRedisKeysOnCleanup(t, prefix)
	store, err := redis.New(rdb, redis.Config{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	const lapse = 2 * time.Second
	health := warren.NewDependency("dedup").SetLapse(lapse)
	h := middleware.Dedup(store, middleware.DedupOptions{StoreTimeout: 200 * time.Millisecond, Health: health})(returning(nil))

	proxy.Stall(true)
	err = h.Handle(context.Background(), &warren.Message{Consumer: "c", Event: warren.Event{ID: testenv.Name(t, "evt")}})
	proxy.Stall(false)
	if !errors.Is(err, warren.ErrUnavailable) {
		t.Fatalf("delivery on a stalled store = %v, want unavailable", err)
	}
	failed := time.Now()
	if st := health.State(); st.Up {
		t.Fatalf("health right after the timeout = %+v, want down", st)
	}
	testenv.WaitFor(t, 30*time.Second, "the down state to lapse", func() bool { return health.State().Up })
	if waited := time.Since(failed); waited < lapse-100*time.Millisecond {
		t.Errorf("down state lapsed after %v, before its lapse of %v", waited, lapse)
	}
}
