// Package webhook is an example consumer service: it delivers every event
// to one or more HTTP endpoints, signed, with retries and dead letters, and
// without POSTing an event to an endpoint again once that endpoint has
// accepted it.
//
// Each delivery is a POST of the event's JSON, exactly as it was produced,
// with headers X-Warren-Event-Id (the key a receiver deduplicates on),
// X-Warren-Event-Type, X-Warren-Timestamp and X-Warren-Signature
// ("sha256=" + hex HMAC-SHA256 of "<timestamp>.<body>"). Receivers check
// deliveries with [Verify].
//
// A 2xx answer is success. Timeouts, network errors, 408, 429 (after its
// Retry-After) and 5xx are retried through the consumer's retry tiers. Any
// other 4xx dead-letters the event at once, with the status and the start
// of the response body in its metadata.
//
// Deduplication is per endpoint (a Redis dedup store in the runnable
// service): when one endpoint fails and another succeeds, the retry goes
// only to the one that failed, and a DLQ replay after a fix reaches only
// the endpoints that never took the event.
package webhook
