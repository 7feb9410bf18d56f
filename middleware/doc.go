// Package middleware owns the stock [warren.Middleware] that runs between a
// consumer and a handler, and [Chain], which composes them.
//
// Each middleware does one thing and reports what it did through the
// handler's error, in the vocabulary of [warren.Classify]: a filter returns
// [warren.Skip], [Dedup] returns [warren.Duplicate] or [warren.Defer], and
// [Timeout] and [Recover] turn an overrun and a panic into transient
// failures. Nothing is dropped silently, so the consumer's ack policy, the
// logs and the metrics all see every outcome.
//
// # Order
//
// The first middleware given to [Chain] is the outermost: it sees the
// message first and the outcome last. The recommended order is
//
//	middleware.Chain(
//		middleware.Recover(),                  // a panic anywhere below becomes an error
//		middleware.Logging(logger, opts),      // one line per outcome, including skips
//		middleware.PrefixFilter("workitem."),  // cheap filters before any I/O
//		middleware.SkipInitiators(),           // SYSTEM.* events are not ours
//		middleware.Dedup(store, dedupOpts),    // claim the event, mark it done
//		middleware.Timeout(30*time.Second),    // bounds the handler, inside the lease
//	)
//
// Filters come before [Dedup] so a skipped event costs no store round trip,
// and [Timeout] comes after it so the deadline bounds the handler alone and
// stays shorter than the dedup lease.
//
// # Misconfiguration
//
// Constructors panic on arguments that can only be a programming mistake —
// a nil store, a non-positive timeout, an empty prefix — the way
// [time.NewTicker] panics on a non-positive period. A misconfigured chain
// thus fails when the program starts, never on a message: no event is ever
// retried or dead-lettered because a middleware was built wrong.
package middleware
