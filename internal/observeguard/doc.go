// Package observeguard runs calls to a user's Observer (the relays' and
// the consumer's) so that a panic in one costs that report, not the
// process. The relays tell their Observer of a publish after the
// broker's confirm and before the settle that records it, and the
// consumer tells its Observer of a delivery before it handles it: a panic
// there, unrecovered, would end the process with the row unsettled or the
// delivery unacked, so the restarted process would publish the batch or
// take the delivery again, and panic again. A metrics adapter's bug must
// cost its metrics, not duplicates or a crash loop.
//
// The panic is logged at Error level with the method, its value (at most
// 4 KiB; by type when it cannot be formatted) and the stack, at most once
// per method every 10 seconds, with a count of the panics not logged
// since. A runtime.Goexit cannot be stopped: it is logged the same way,
// and the goroutine that called the Observer ends.
package observeguard
