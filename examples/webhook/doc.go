// Package webhook is an example consumer service: it delivers every event
// to one or more HTTP endpoints, signed, with retries and dead letters, and
// without POSTing an event to an endpoint again once that endpoint has
// accepted it.
//
// Each delivery is a POST of the event's JSON, exactly as it was produced,
// with headers X-Warren-Event-Id (the key a receiver deduplicates on),
// X-Warren-Event-Type, X-Warren-Timestamp (Unix seconds) and
// X-Warren-Signature. Receivers check deliveries with [Verify].
//
// # Signatures
//
// X-Warren-Signature is "v2=" and the lower-case hex HMAC-SHA256, keyed
// with the endpoint's secret, of this string (\n is one newline byte, +
// concatenates; the body is the request body's exact bytes):
//
//	"v2\n" + event_id + "\n" + event_type + "\n" + timestamp + "\n" + body
//
// The id, the type and the timestamp are signed with the body, so a
// captured delivery re-sent under another event id no longer verifies, and
// once [Verify] passed the id header can be deduplicated on. An event id or
// type holding a control character (a newline could shift one field into
// the next) or leading or trailing blanks cannot be signed: such an event
// is dead-lettered, never posted. A receiver refuses timestamps more than
// its tolerance (five minutes in [Receiver]) away from its clock, so a
// capture can be replayed only within that window, where deduplication on
// the signed id makes it harmless.
//
// Each [Endpoint] may have its own Secret (WEBHOOK_SECRET_<n> for the n-th
// endpoint of WEBHOOK_URL in the runnable service); Config.Secret
// (WEBHOOK_SECRET) signs for the endpoints without one. With a secret per
// endpoint, a delivery captured at one endpoint, or a secret leaked by
// one, is not accepted by another.
//
// The version prefix lets the scheme change without breaking receivers.
// The retired v1 ("sha256=" + hex HMAC-SHA256 of timestamp + "." + body)
// signed neither the id nor the type. Senders sign v2 only; to migrate,
// first deploy receivers that verify with [AcceptV1] (they accept both,
// checking a v1 delivery's id and type headers against its signed body),
// then upgrade the sender, then drop AcceptV1.
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
// Errors (and so logs and dead-letter headers) never quote an endpoint's
// URL, whose path (Slack, Discord, Teams), query or userinfo may hold its
// credentials: they name it by Endpoint.Name, or by scheme and host and a
// short hash of the URL ("https://hooks.slack.com/…#3fa2c1"). They keep at
// most 200 bytes of the response body, on one line, and a redirect's
// Location without userinfo or query values, both with every path segment,
// query value and userinfo of the endpoint's URL and the signing secret
// masked.
//
// Deduplication is per endpoint (a Redis dedup store in the runnable
// service): when one endpoint fails and another succeeds, the retry goes
// only to the one that failed, and a DLQ replay after a fix reaches only
// the endpoints that never took the event.
package webhook
