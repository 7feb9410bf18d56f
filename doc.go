// Package warren is the shared vocabulary of the warren framework: the
// [Event] envelope that travels from the outbox to every consumer, the
// [Message] a handler receives, the [Handler] and [Middleware] types, and
// the outcome errors a handler returns to say what should happen next.
//
// Nothing in this package dials a broker or a database. The packages that do
// — consumer, relay, dedup, dlq — all speak in these types, so a handler
// written against them runs unchanged behind any of them.
//
// # Outcomes
//
// A handler reports what happened through its error:
//
//   - nil: the event was handled; the message is acknowledged.
//   - [Skip]: the event is not for this handler; acknowledged and counted
//     as skipped.
//   - [Duplicate]: the event was already handled; acknowledged and counted
//     as a duplicate.
//   - [RetryAfter] or any other error: a transient failure; the message is
//     retried later, up to the consumer's attempt limit.
//   - [Defer]: try again later without spending an attempt (another
//     worker holds the event's lease).
//   - [Unavailable]: a deferral because a dependency needed before the
//     handler (a dedup store) could not be reached; counted apart, and
//     reported with a [Dependency] in the consumer's health.
//   - [Permanent]: retrying cannot help; the message goes to the
//     dead-letter queue at once.
//
// [Classify] turns any error into its [Outcome], which is how the consumer
// and the logging middleware agree on what an error means.
package warren
