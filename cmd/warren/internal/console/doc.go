// Package console is warren's web console, served by `warren console`: the
// page an operator opens after a bad deploy to see what broke and send it
// back.
//
// Pages are rendered on the server from html/template with embedded
// assets and one hand-written stylesheet; there is no script, so every page
// works with JavaScript off (the overview refreshes itself with a meta
// refresh).
//
//   - The overview lists every warren consumer on the broker (queue depth,
//     how long its oldest waiting event has waited, unacknowledged, DLQ and
//     retry-tier depths, consumers, rates), from an [Inventory], and the
//     outbox table's counts when a database is given. With Config.Relays
//     it reads each relay's /healthz and shows whether it holds the stream
//     back (relay.Config's HoldBack), for which consumer's queue and since
//     when, or is blocked by the broker; that consumer's row says it holds
//     the relays back.
//   - A dead-letter queue's page groups its messages by failure signature
//     ([dlq.Signature]: class plus error text with ids, numbers and hosts
//     normalised), so 4,000 copies of one timeout are one row. A group opens
//     to its messages, a message to its headers, failure history and body.
//   - Actions (replay, export, purge, outbox redrive) are POSTs that first
//     show a dry run saying how many messages they will touch. The dry run's
//     scope, count and the exact messages it counted (their fingerprints,
//     or the rows' ids) are kept on the server as a plan; confirming runs
//     the plan once, in the background, on exactly those (what else of the
//     scope it meets is left and counted), and redirects to the result
//     page, which shows the action's progress until it ends; reloading a
//     page never repeats an action. The confirmation lists the event ids
//     of the first 20 messages counted (and how many more). A message's
//     page, and a group page's selection, name messages by fingerprint,
//     never by a (possibly shared or padded) event id. Fingerprints leave
//     out the headers a broker bumps on every read (x-delivery-count on a
//     quorum queue). An action runs on an AMQP connection of its own, so
//     nothing a page meets on another queue stops it. An export that ends
//     short of what was confirmed, or fails, is cut off (the browser shows
//     a failed download). A result, kept 24 hours, drops its plan's lists
//     when its action ends.
//
// Routes: GET / (overview; ?refresh=off stops the refresh), GET
// /dlq?queue=NAME (open a queue by name), GET /dlq/{queue} (groups), GET
// /dlq/{queue}/group/{id}, GET /dlq/{queue}/message?id=EVENT_ID (or
// ?fingerprint=FP or ?pos=N), POST /dlq/{queue}/replay|export|purge, GET /outbox, POST
// /outbox/redrive, GET /results/{id}, GET and POST /login, POST /logout,
// GET /static/console.css. docs/adr/022-console-actions.md explains the
// actions' design.
//
// Reading a dead-letter queue uses package dlqtool, which reads by
// consuming without acknowledging: two reads of one queue at once would
// each see part of it. The console therefore runs one operation per
// queue at a time; the overview, which refreshes, never reads a DLQ.
//
// Safety: it listens on localhost by default, and refuses to start on an
// address other machines reach without a token or basic auth and without
// TLS (Config.TLSCertFile, or Config.BehindTLSProxy). A listen address is
// loopback only as a loopback IP or exactly "localhost" ("localhost." is
// asked of DNS), and Serve refuses a bound address beyond loopback without
// credentials. Behind a TLS proxy it needs credentials and
// Config.AllowedHosts whatever it listens on. Every request's Host must be
// localhost, a loopback address, the listen IP or one of
// Config.AllowedHosts (behind a proxy: only those, so a proxy that
// rewrites Host to its upstream's cannot make a rebinding page's requests
// pass; the proxy must pass the original Host on), or it is refused with
// 421 before anything else runs (DNS rebinding). A request whose
// Sec-Fetch-Site says another site made it is refused with 403, GETs too
// (a page's <img> would make the browser scan a DLQ), but for /login and
// static files. Access can need a token (a bearer header, or the login
// form, which starts a session: a random id in an HttpOnly
// SameSite=Strict cookie, Secure over TLS or behind the TLS proxy, ended
// by logout, after 12 hours and with the process) or basic auth. Five wrong tokens or
// passwords from one address within a minute lock that address out for
// the rest of the minute. Every POST needs a CSRF token bound to a cookie
// by an HMAC with a per-process secret and must come from the same
// origin; read-only mode refuses every action. Pages render a dead message
// from one masked view (messageView; dead outbox rows from deadRowView),
// built once per message: every field holding producer text (ids, types,
// error, properties, origin, consumer, host, x-death entries, header names
// and values, the body) goes through redact.Secrets there, and the
// templates have no mask function to forget (a binary body's and a bytes
// header's are masked on the bytes, before the hex dump).
//
// # What would still break it
//
// Outside what the tests model: a --behind-tls-proxy that is not (the
// flag is the operator's word); an --allow-host name whose DNS an
// attacker controls; all clients behind a proxy sharing one address for
// the login lockout; secrets redact.Secrets does not recognise or in
// another encoding than UTF-8 (UTF-16, compressed bodies), which pages
// show; two consoles or a console and `warren dlq` on one queue, whose
// scans see parts of it; a plan's memory (about 50 bytes a counted
// message, up to 1,000 plans for 15 minutes); a page's scan holds every
// message it reads until it ends, but for bodies (the group pages keep
// none; a message's page keeps those of the messages it shows), so
// ScanLimit bounds memory by messages' headers; browsers that send no Sec-Fetch-Site; a proxy
// that rewrites Host to a name given with --allow-host; a header other
// than x-delivery-count / x-acquired-count that a broker changes on every
// read. docs/adr/022-console-actions.md lists them in full.
package console
