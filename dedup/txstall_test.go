package dedup_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/dedup"
	"github.com/warrenmq/warren/dedup/postgres"
	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/middleware"
)

// Review finding 1A. In Transactional mode a Postgres that stalls after
// the claim holds the worker no longer than the store's CallTimeout: the
// transaction's begin gives up, the message is deferred as unavailable
// (the handler did not run, so no attempt is spent) and the store shows
// down. Before the fix the begin ran on the handler's context, which has
// no deadline, and waited as long as the stall lasted, with health green.
func TestTransactionalBeginOnStalledPostgresIsBounded(t *testing.T) {
	t.Parallel()
	store, proxy := pgStoreBehindProxy(t, postgres.Config{CallTimeout: time.Second})
	health := warren.NewDependency("dedup")
	ran := false
	h := middleware.Dedup(&stallAfterClaim{Store: store, proxy: proxy}, middleware.DedupOptions{
		Transactional: true, StoreTimeout: time.Second, Health: health,
	})(warren.HandlerFunc(func(context.Context, *warren.Message) error { ran = true; return nil }))

	err := handleOnStalledStore(t, h)
	if outcome, delay := warren.Classify(err); outcome != warren.OutcomeDeferred || !errors.Is(err, warren.ErrUnavailable) || delay == 0 {
		t.Errorf("delivery = %v after %v (%v), want deferred as unavailable", outcome, delay, err)
	}
	if ran {
		t.Error("the handler ran")
	}
	if st := health.State(); st.Up {
		t.Errorf("health %+v while the store stalls, want down", st)
	}
}

// stallAfterClaim stalls the store's proxy once a claim is answered, so
// what follows the claim (the transaction) meets a stalled database.
type stallAfterClaim struct {
	*postgres.Store
	proxy *testenv.Proxy
}

func (s *stallAfterClaim) Claim(ctx context.Context, key string, lease time.Duration) (dedup.Claim, error) {
	c, err := s.Store.Claim(ctx, key, lease)
	s.proxy.Stall(true)
	return c, err
}

// Review finding 1A, at the other end of the transaction: a Postgres that
// stalls while the handler runs holds the worker no longer than the
// store's CallTimeout once the handler is done. The done-mark and the
// commit give up, the delivery is retried (the handler ran, so an attempt
// is spent; its writes rolled back with the mark), and the store shows
// down. Before the fix the mark and the commit ran on the handler's
// context and waited as long as the stall lasted.
func TestTransactionalCommitOnStalledPostgresIsBounded(t *testing.T) {
	t.Parallel()
	store, proxy := pgStoreBehindProxy(t, postgres.Config{CallTimeout: time.Second})
	health := warren.NewDependency("dedup")
	h := middleware.Dedup(store, middleware.DedupOptions{
		Transactional: true, StoreTimeout: time.Second, Health: health,
	})(warren.HandlerFunc(func(context.Context, *warren.Message) error {
		proxy.Stall(true)
		return nil
	}))

	err := handleOnStalledStore(t, h)
	if outcome, _ := warren.Classify(err); outcome != warren.OutcomeRetry {
		t.Errorf("delivery = %v (%v), want a retry", outcome, err)
	}
	if st := health.State(); st.Up {
		t.Errorf("health %+v while the store stalls, want down", st)
	}
}

// handleOnStalledStore runs one delivery through h and returns its error,
// failing t if it has not returned within 30s: a store call without a
// deadline hangs there.
func handleOnStalledStore(t *testing.T, h warren.Handler) error {
	t.Helper()
	result := make(chan error, 1)
	go func() {
		result <- h.Handle(context.Background(), &warren.Message{Consumer: "c", Event: warren.Event{ID: testenv.Name(t, "evt")}})
	}()
	var err error
	testenv.WaitFor(t, 30*time.Second, "the delivery to return on the stalled store", func() bool {
		select {
		case err = <-result:
			return true
		default:
			return false
		}
	})
	return err
}
