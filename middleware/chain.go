package middleware

import (
	"fmt"

	"github.com/warrenmq/warren"
)

// Chain composes mws into one middleware. The first is the outermost: for
// Chain(a, b, c) and handler h, a message passes a, then b, then c, then h,
// and the outcome travels back through c, b and a. Chain() returns a
// middleware that leaves the handler as it is.
//
// Chain panics if any middleware is nil.
func Chain(mws ...warren.Middleware) warren.Middleware {
	for i, mw := range mws {
		if mw == nil {
			panic(fmt.Sprintf("middleware: Chain: middleware %d of %d is nil", i+1, len(mws)))
		}
	}
	mws = append([]warren.Middleware(nil), mws...) // later changes to the caller's slice must not reorder the chain
	return func(next warren.Handler) warren.Handler {
		for i := len(mws) - 1; i >= 0; i-- {
			next = mws[i](next)
		}
		return next
	}
}
