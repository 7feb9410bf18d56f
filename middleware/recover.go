package middleware

import (
	"context"
	"fmt"
	"runtime/debug"

	"github.com/warrenmq/warren"
)

// PanicError is the error [Recover] returns for a handler that panicked. It
// classifies as a transient failure, so the message is retried like after
// any other error and the process keeps running.
type PanicError struct {
	// Value is what the handler passed to panic.
	Value any
	// Stack is the panicking goroutine's stack, captured where the panic
	// was recovered so it still shows the frame that panicked.
	Stack []byte
}

// Error reports the panic value; the stack is kept out of the text because
// the text travels in logs' message fields and dead-letter headers, where
// [Logging] and the consumer add the stack on their own terms.
func (e *PanicError) Error() string { return fmt.Sprintf("panic: %v", e.Value) }

// Unwrap returns the panic value when it is an error, so errors.Is sees
// through a panic(err). A value that is one of warren's outcome errors other
// than a retry (panic(warren.Skip(…))) is not returned: a panic is a
// transient failure whatever it carries.
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	if outcome, _ := warren.Classify(err); outcome != warren.OutcomeRetry {
		return nil
	}
	return err
}

// Recover turns a panic in the handlers below it into a [*PanicError]. Put
// it first in a [Chain] so it also covers the other middleware.
func Recover() warren.Middleware {
	return func(next warren.Handler) warren.Handler {
		return warren.HandlerFunc(func(ctx context.Context, m *warren.Message) (err error) {
			defer func() {
				if v := recover(); v != nil {
					err = &PanicError{Value: v, Stack: debug.Stack()}
				}
			}()
			return next.Handle(ctx, m)
		})
	}
}
