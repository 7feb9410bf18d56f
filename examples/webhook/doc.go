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
// Redirects are not followed, whatever http.Client the service is given: a
// 3xx dead-letters the event at once ("endpoint answered 307 redirect to
// …; webhooks do not follow redirects"). Following one would re-send the
// signed body to wherever the endpoint points, internal addresses
// included, and a 301 would turn the POST into a body-less GET whose 200
// looks like a delivery. It is permanent, not retried, because the
// configured URL is wrong and stays wrong until the operator configures
// the final one and replays the dead letters.
//
// Errors (and so logs and dead-letter headers) name an endpoint without
// its userinfo and with every query value masked, and keep at most 200
// bytes of the response body, on one line, with the endpoint's secrets
// masked.
//
// Deduplication is per endpoint (a Redis dedup store in the runnable
// service): when one endpoint fails and another succeeds, the retry goes
// only to the one that failed, and a DLQ replay after a fix reaches only
// the endpoints that never took the event.
package webhook
