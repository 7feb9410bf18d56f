package middleware_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/middleware"
)

// waitForDeadline is a handler that honours its context: it returns when
// the context ends, with what returnErr makes of ctx.Err().
func waitForDeadline(returnErr func(error) error) warren.Handler {
	return warren.HandlerFunc(func(ctx context.Context, _ *warren.Message) error {
		<-ctx.Done()
		return returnErr(ctx.Err())
	})
}

func TestTimeoutOverrunIsTransient(t *testing.T) {
	const d = 50 * time.Millisecond
	for name, returnErr := range map[string]func(error) error{
		"ctx.Err()":               func(err error) error { return err },
		"wrapped as Permanent":    warren.Permanent,
		"some error of its own":   func(error) error { return errors.New("http: request canceled") },
		"wrapped as a RetryAfter": func(err error) error { return warren.RetryAfter(time.Hour, err) },
	} {
		t.Run(name, func(t *testing.T) {
			start := time.Now()
			err := middleware.Timeout(d)(waitForDeadline(returnErr)).Handle(context.Background(), &warren.Message{})
			if elapsed := time.Since(start); elapsed < d {
				t.Errorf("returned after %v, before the %v deadline", elapsed, d)
			}
			if !errors.Is(err, middleware.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("error %v does not match ErrTimeout and DeadlineExceeded", err)
			}
			if outcome, delay := warren.Classify(err); outcome != warren.OutcomeRetry || delay != 0 {
				t.Errorf("overrun classifies as %v after %v, want a plain retry", outcome, delay)
			}
		})
	}
}

func TestTimeoutKeepsResultsWithinDeadline(t *testing.T) {
	for _, want := range []error{nil, warren.Skip("not ours"), warren.Permanent(errors.New("bad payload"))} {
		h := middleware.Timeout(time.Minute)(warren.HandlerFunc(func(ctx context.Context, _ *warren.Message) error {
			if deadline, ok := ctx.Deadline(); !ok || time.Until(deadline) > time.Minute {
				t.Errorf("handler's deadline = %v, %v; want within a minute", deadline, ok)
			}
			return want
		}))
		if err := h.Handle(context.Background(), &warren.Message{}); err != want {
			t.Errorf("Timeout changed %v into %v", want, err)
		}
	}
}

// A handler that finishes its work after the deadline keeps its success:
// retrying would do the work twice.
func TestTimeoutLateSuccessIsSuccess(t *testing.T) {
	err := middleware.Timeout(10*time.Millisecond)(waitForDeadline(func(error) error { return nil })).Handle(context.Background(), &warren.Message{})
	if err != nil {
		t.Errorf("late success = %v, want nil", err)
	}
}

// A shutdown (the consumer's context ending first) is not an overrun.
func TestTimeoutLeavesShutdownAlone(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	h := middleware.Timeout(time.Minute)(warren.HandlerFunc(func(hctx context.Context, _ *warren.Message) error {
		cancel()
		<-hctx.Done()
		return hctx.Err()
	}))
	err := h.Handle(ctx, &warren.Message{})
	if !errors.Is(err, context.Canceled) || errors.Is(err, middleware.ErrTimeout) {
		t.Errorf("shutdown = %v, want context.Canceled and not a timeout", err)
	}
}

func TestTimeoutRejectsNonPositive(t *testing.T) {
	mustPanic(t, "non-positive duration 0s", func() { middleware.Timeout(0) })
	mustPanic(t, "non-positive duration -1s", func() { middleware.Timeout(-time.Second) })
}
