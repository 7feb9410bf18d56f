package middleware_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/dedup"
	"github.com/warrenmq/warren/dedup/deduptest"
	"github.com/warrenmq/warren/dedup/memory"
	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/middleware"
)

func msg(consumer, id string) *warren.Message {
	return &warren.Message{Event: warren.Event{ID: id, Type: "workitem.updated"}, Consumer: consumer, Attempt: 1, MaxAttempts: 3}
}

func outcomeOf(err error) warren.Outcome {
	o, _ := warren.Classify(err)
	return o
}

func TestDedupNamespacesKeysByConsumer(t *testing.T) {
	store := testenv.MemoryStore(t)
	runs := map[string]int{}
	h := middleware.Dedup(store, middleware.DedupOptions{})(warren.HandlerFunc(func(_ context.Context, m *warren.Message) error {
		runs[m.Consumer]++
		return nil
	}))
	for _, consumer := range []string{"webhook", "automation", "webhook", "automation"} {
		_ = h.Handle(context.Background(), msg(consumer, "e1"))
	}
	if runs["webhook"] != 1 || runs["automation"] != 1 {
		t.Errorf("runs = %v, want each consumer once", runs)
	}
	if got := deduptest.State(t, store, "webhook:e1"); got != dedup.Done {
		t.Errorf("key webhook:e1 is %v, want done", got)
	}
}

func TestDedupCustomKey(t *testing.T) {
	store := testenv.MemoryStore(t)
	byEventOnly := middleware.DedupOptions{Key: func(m *warren.Message) string { return "global:" + m.Event.ID }}
	h := middleware.Dedup(store, byEventOnly)(returning(nil))
	if err := h.Handle(context.Background(), msg("webhook", "e1")); err != nil {
		t.Fatal(err)
	}
	if err := h.Handle(context.Background(), msg("automation", "e1")); outcomeOf(err) != warren.OutcomeDuplicate {
		t.Errorf("second consumer under a shared key = %v, want duplicate", err)
	}
	empty := middleware.DedupOptions{Key: func(*warren.Message) string { return "" }}
	if err := middleware.Dedup(store, empty)(returning(nil)).Handle(context.Background(), msg("w", "e")); outcomeOf(err) != warren.OutcomePermanent {
		t.Errorf("empty key = %v, want a permanent failure", err)
	}
}

func TestDedupWithoutConsumerOrEventIDFailsPermanently(t *testing.T) {
	h := middleware.Dedup(testenv.MemoryStore(t), middleware.DedupOptions{})(returning(nil))
	for _, m := range []*warren.Message{msg("", "e1"), msg("webhook", "")} {
		err := h.Handle(context.Background(), m)
		if outcomeOf(err) != warren.OutcomePermanent || !strings.Contains(err.Error(), "no key") {
			t.Errorf("consumer %q, event %q: %v, want a permanent failure naming the missing key", m.Consumer, m.Event.ID, err)
		}
	}
}

// Acknowledged outcomes mark the key done; the others free it so the next
// delivery (a retry, a deferral, a replay from the DLQ) runs the handler.
func TestDedupSettlesByOutcome(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want dedup.Result
	}{
		{nil, dedup.Done},
		{warren.Skip("not ours"), dedup.Done},
		{warren.Duplicate("seen elsewhere"), dedup.Done},
		{errors.New("503"), dedup.Acquired},
		{warren.RetryAfter(time.Minute, errors.New("429")), dedup.Acquired},
		{warren.Permanent(errors.New("400")), dedup.Acquired},
		{warren.Defer(time.Second, "later"), dedup.Acquired},
	} {
		store := testenv.MemoryStore(t)
		err := middleware.Dedup(store, middleware.DedupOptions{})(returning(tc.err)).Handle(context.Background(), msg("c", "e"))
		if err != tc.err {
			t.Errorf("Dedup changed the handler's error %v into %v", tc.err, err)
		}
		if got := deduptest.State(t, store, "c:e"); got != tc.want {
			t.Errorf("after %v the key is %v, want %v", tc.err, got, tc.want)
		}
	}
}

func TestDedupBusyDefersWithoutRunning(t *testing.T) {
	store := testenv.MemoryStore(t)
	if _, err := store.Claim(context.Background(), "c:e", time.Minute); err != nil {
		t.Fatal(err)
	}
	ran := false
	h := middleware.Dedup(store, middleware.DedupOptions{BusyDelay: 2 * time.Second})(warren.HandlerFunc(func(context.Context, *warren.Message) error {
		ran = true
		return nil
	}))
	err := h.Handle(context.Background(), msg("c", "e"))
	if outcome, delay := warren.Classify(err); outcome != warren.OutcomeDeferred || delay != 2*time.Second || ran {
		t.Errorf("busy key: %v after %v, ran %v; want deferred 2s without running", outcome, delay, ran)
	}
}

// A panicking handler's key is freed on the way out, so its retry runs at
// once instead of waiting out the lease.
func TestDedupReleasesOnPanic(t *testing.T) {
	store := testenv.MemoryStore(t)
	h := middleware.Chain(middleware.Recover(), middleware.Dedup(store, middleware.DedupOptions{}))(panicking("bug"))
	if err := h.Handle(context.Background(), msg("c", "e")); outcomeOf(err) != warren.OutcomeRetry {
		t.Fatalf("panic = %v, want retry", err)
	}
	if got := deduptest.State(t, store, "c:e"); got != dedup.Acquired {
		t.Errorf("after a panic the key is %v, want free", got)
	}
}

// The consumer's context ends (shutdown) while the handler runs: the key is
// still released, on a context of its own.
func TestDedupReleasesAfterCancellation(t *testing.T) {
	store := testenv.MemoryStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	h := middleware.Dedup(store, middleware.DedupOptions{})(warren.HandlerFunc(func(ctx context.Context, _ *warren.Message) error {
		cancel()
		return ctx.Err()
	}))
	if err := h.Handle(ctx, msg("c", "e")); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want the handler's context.Canceled", err)
	}
	if got := deduptest.State(t, store, "c:e"); got != dedup.Acquired {
		t.Errorf("after cancellation the key is %v, want released", got)
	}
}

// faultyStore wraps a store and fails the operations it is told to.
type faultyStore struct {
	dedup.Store
	claimErr, completeErr, releaseErr error
	claimResult                       dedup.Result
}

func (s *faultyStore) Claim(ctx context.Context, key string, lease time.Duration) (dedup.Claim, error) {
	if s.claimErr != nil {
		return dedup.Claim{}, s.claimErr
	}
	if s.claimResult != 0 {
		return dedup.Claim{Key: key, Result: s.claimResult}, nil
	}
	return s.Store.Claim(ctx, key, lease)
}

func (s *faultyStore) Complete(ctx context.Context, c dedup.Claim) error {
	if s.completeErr != nil {
		return s.completeErr
	}
	return s.Store.Complete(ctx, c)
}

func (s *faultyStore) Release(ctx context.Context, c dedup.Claim) error {
	if s.releaseErr != nil {
		return s.releaseErr
	}
	return s.Store.Release(ctx, c)
}

func jsonLogger() (*slog.Logger, *bytes.Buffer) {
	var buf bytes.Buffer
	return slog.New(slog.NewJSONHandler(&buf, nil)), &buf
}

func TestDedupStoreErrors(t *testing.T) {
	down := errors.New("dial tcp 127.0.0.1:6379: connection refused")
	ran := 0
	counting := warren.HandlerFunc(func(context.Context, *warren.Message) error { ran++; return nil })

	t.Run("claim fails closed", func(t *testing.T) {
		ran = 0
		s := &faultyStore{Store: testenv.MemoryStore(t), claimErr: down}
		health := warren.NewDependency("dedup")
		mw := middleware.Dedup(s, middleware.DedupOptions{UnavailableDelay: time.Minute, Health: health})
		err := mw(counting).Handle(context.Background(), msg("c", "e"))
		// Deferred, not retried: the handler never ran, so no attempt is
		// spent, and an outage cannot dead-letter the message.
		outcome, delay := warren.Classify(err)
		if outcome != warren.OutcomeDeferred || delay != time.Minute || !errors.Is(err, warren.ErrUnavailable) || !errors.Is(err, down) || ran != 0 {
			t.Errorf("claim error: %v after %v (%v), ran %d; want an Unavailable deferral of a minute wrapping the store's error, handler not run", outcome, delay, err, ran)
		}
		if st := health.State(); st.Up || !strings.Contains(st.Error, down.Error()) {
			t.Errorf("health after a failed claim = %+v, want down with the store's error", st)
		}
		s.claimErr = nil
		if err := mw(counting).Handle(context.Background(), msg("c", "e")); err != nil || ran != 1 {
			t.Fatalf("after the store came back: %v, ran %d", err, ran)
		}
		if st := health.State(); !st.Up {
			t.Errorf("health after the store answered = %+v, want up", st)
		}
	})
	t.Run("claim fails open when told", func(t *testing.T) {
		ran = 0
		s := &faultyStore{Store: testenv.MemoryStore(t), claimErr: down}
		logger, logs := jsonLogger()
		err := middleware.Dedup(s, middleware.DedupOptions{FailOpen: true, Logger: logger})(counting).Handle(context.Background(), msg("c", "e"))
		if err != nil || ran != 1 || !strings.Contains(logs.String(), `"level":"WARN"`) {
			t.Errorf("FailOpen: %v, ran %d, log %s; want the handler run and a warning", err, ran, logs)
		}
	})
	t.Run("complete fails", func(t *testing.T) {
		for _, completeErr := range []error{down, dedup.ErrLeaseLost} {
			s := &faultyStore{Store: testenv.MemoryStore(t), completeErr: completeErr}
			logger, logs := jsonLogger()
			err := middleware.Dedup(s, middleware.DedupOptions{Logger: logger})(returning(nil)).Handle(context.Background(), msg("c", "e"))
			if err != nil {
				t.Errorf("complete error %v: %v, want nil (the handler's work is done; retrying would redo it)", completeErr, err)
			}
			if !strings.Contains(logs.String(), completeErr.Error()) {
				t.Errorf("complete error %v not logged: %s", completeErr, logs)
			}
		}
	})
	t.Run("release fails", func(t *testing.T) {
		s := &faultyStore{Store: testenv.MemoryStore(t), releaseErr: down}
		logger, logs := jsonLogger()
		handlerErr := errors.New("503")
		err := middleware.Dedup(s, middleware.DedupOptions{Logger: logger})(returning(handlerErr)).Handle(context.Background(), msg("c", "e"))
		if err != handlerErr || !strings.Contains(logs.String(), "release failed") {
			t.Errorf("release error: %v, log %s; want the handler's error unchanged and a warning", err, logs)
		}
	})
	t.Run("unknown result", func(t *testing.T) {
		ran = 0
		s := &faultyStore{Store: testenv.MemoryStore(t), claimResult: 42}
		err := middleware.Dedup(s, middleware.DedupOptions{})(counting).Handle(context.Background(), msg("c", "e"))
		if outcomeOf(err) != warren.OutcomeRetry || ran != 0 {
			t.Errorf("unknown claim result: %v, ran %d; want a retry without running", err, ran)
		}
	})
}

// A store's error may quote its connection string; the lines Dedup logs
// about it (the store passed over in FailOpen mode, a release that failed)
// must not, whatever logger the service gave it.
func TestDedupStoreErrorLogIsRedacted(t *testing.T) {
	const password = "pw-s3cr3t-42"
	down := errors.New("dial redis://:" + password + "@cache:6379/0: connection refused")
	for _, s := range []*faultyStore{
		{Store: testenv.MemoryStore(t), claimErr: down},
		{Store: testenv.MemoryStore(t), releaseErr: down},
	} {
		logger, logs := jsonLogger()
		middleware.Dedup(s, middleware.DedupOptions{FailOpen: true, Logger: logger})(returning(errors.New("503"))).Handle(context.Background(), msg("c", "e"))
		if log := logs.String(); strings.Contains(log, password) || !strings.Contains(log, "redis://:xxxxx@cache:6379/0") {
			t.Errorf("want the store's error logged redacted: %s", log)
		}
	}
}

// txStore is a memory store with a Transactor whose commit can be made to
// fail, to check how Dedup reads WithinTx's errors (dedup/postgres tests
// the real transactions).
type txStore struct {
	*memory.Store
	commitErr error
}

func (s *txStore) WithinTx(ctx context.Context, c dedup.Claim, fn func(context.Context) error) error {
	if err := fn(ctx); err != nil {
		return err
	}
	if s.commitErr != nil {
		return s.commitErr
	}
	return s.Complete(ctx, c)
}

func TestDedupTransactional(t *testing.T) {
	t.Run("skip commits", func(t *testing.T) {
		s := &txStore{Store: testenv.MemoryStore(t)}
		err := middleware.Dedup(s, middleware.DedupOptions{Transactional: true})(returning(warren.Skip("no"))).Handle(context.Background(), msg("c", "e"))
		if outcomeOf(err) != warren.OutcomeSkipped || deduptest.State(t, s, "c:e") != dedup.Done {
			t.Errorf("skip in a transaction: %v, key %v; want skipped and done", err, deduptest.State(t, s, "c:e"))
		}
	})
	t.Run("failure releases", func(t *testing.T) {
		s := &txStore{Store: testenv.MemoryStore(t)}
		handlerErr := warren.Permanent(errors.New("400"))
		err := middleware.Dedup(s, middleware.DedupOptions{Transactional: true})(returning(handlerErr)).Handle(context.Background(), msg("c", "e"))
		if err != handlerErr || deduptest.State(t, s, "c:e") != dedup.Acquired {
			t.Errorf("failure in a transaction: %v; want the handler's error and a free key", err)
		}
	})
	t.Run("lease lost is a retry", func(t *testing.T) {
		s := &txStore{Store: testenv.MemoryStore(t), commitErr: dedup.ErrLeaseLost}
		err := middleware.Dedup(s, middleware.DedupOptions{Transactional: true})(returning(nil)).Handle(context.Background(), msg("c", "e"))
		if outcomeOf(err) != warren.OutcomeRetry || !errors.Is(err, dedup.ErrLeaseLost) {
			t.Errorf("lease lost at commit: %v, want a retry matching ErrLeaseLost", err)
		}
	})
	t.Run("commit failure releases and retries", func(t *testing.T) {
		s := &txStore{Store: testenv.MemoryStore(t), commitErr: errors.New("connection reset during COMMIT")}
		err := middleware.Dedup(s, middleware.DedupOptions{Transactional: true})(returning(nil)).Handle(context.Background(), msg("c", "e"))
		if outcomeOf(err) != warren.OutcomeRetry || deduptest.State(t, s, "c:e") != dedup.Acquired {
			t.Errorf("commit failure: %v; want a retry and a free key", err)
		}
	})
}

func TestDedupRejectsMisconfiguration(t *testing.T) {
	mustPanic(t, "nil store", func() { middleware.Dedup(nil, middleware.DedupOptions{}) })
	mustPanic(t, "negative duration", func() { middleware.Dedup(testenv.MemoryStore(t), middleware.DedupOptions{Lease: -time.Second}) })
	mustPanic(t, "does not", func() {
		middleware.Dedup(testenv.MemoryStore(t), middleware.DedupOptions{Transactional: true})
	})
}

// Consumer "billing:eu" with event "42" and consumer "billing" with event
// "eu:42" are different events of different consumers: both must run.
func TestDedupKeysOfAmbiguousNamesDoNotCollide(t *testing.T) {
	store := testenv.MemoryStore(t)
	ran := 0
	h := middleware.Dedup(store, middleware.DedupOptions{})(warren.HandlerFunc(func(context.Context, *warren.Message) error {
		ran++
		return nil
	}))
	for _, m := range []*warren.Message{
		{Consumer: "billing:eu", Event: warren.Event{ID: "42"}},
		{Consumer: "billing", Event: warren.Event{ID: "eu:42"}},
	} {
		if err := h.Handle(context.Background(), m); err != nil {
			t.Fatalf("%s/%s: %v", m.Consumer, m.Event.ID, err)
		}
	}
	if ran != 2 {
		t.Fatalf("handler ran %d times, want 2: one consumer's event was taken for the other's duplicate", ran)
	}
}
