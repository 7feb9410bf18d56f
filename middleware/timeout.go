package middleware

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/warrenmq/warren"
)

// ErrTimeout is matched (errors.Is) by the error [Timeout] returns for a
// handler that overran its deadline. That error also matches
// context.DeadlineExceeded.
var ErrTimeout = errors.New("handler timed out")

// Timeout gives the handlers below it a context that ends after d. A
// handler that fails after its deadline passed has overrun, and Timeout
// replaces its error with one matching [ErrTimeout]: a transient failure,
// retried like any other, whatever the handler returned (a handler that
// wraps ctx.Err() in warren.Permanent must not dead-letter an event because
// it was slow once).
//
// A handler that succeeds keeps its success even if it finished late: its
// work is done, and retrying it would do it twice. When the consumer's own
// context ends first (shutdown), the handler's error is returned unchanged
// so the consumer can tell a shutdown from an overrun.
//
// Timeout waits for the handler to return. Go cannot stop a goroutine from
// outside, so a handler that ignores its context still runs to the end;
// returning early would leave it running unowned beside the retry of its
// own message. Handlers must honour ctx (see [warren.Handler]).
//
// Timeout panics if d is not positive.
func Timeout(d time.Duration) warren.Middleware {
	if d <= 0 {
		panic(fmt.Sprintf("middleware: Timeout: non-positive duration %v", d))
	}
	return func(next warren.Handler) warren.Handler {
		return warren.HandlerFunc(func(ctx context.Context, m *warren.Message) error {
			hctx, cancel := context.WithTimeoutCause(ctx, d, ErrTimeout)
			defer cancel()
			err := next.Handle(hctx, m)
			if err != nil && ctx.Err() == nil && errors.Is(context.Cause(hctx), ErrTimeout) {
				return &timeoutError{limit: d, err: err}
			}
			return err
		})
	}
}

type timeoutError struct {
	limit time.Duration
	err   error
}

func (e *timeoutError) Error() string {
	return fmt.Sprintf("handler timed out after %v: %v", e.limit, e.err)
}

// Is matches ErrTimeout and context.DeadlineExceeded. The handler's own
// error is deliberately not unwrapped: an outcome error inside it would
// make warren.Classify read the overrun as something other than a retry.
func (e *timeoutError) Is(target error) bool {
	return target == ErrTimeout || target == context.DeadlineExceeded
}
