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
//     unacknowledged, DLQ and retry-tier depths, consumers, rates), from an
//     [Inventory], and the outbox table's counts when a database is given.
//   - A dead-letter queue's page groups its messages by failure signature
//     ([dlq.Signature]: class plus error text with ids, numbers and hosts
//     normalised), so 4,000 copies of one timeout are one row. A group opens
//     to its messages, a message to its headers, failure history and body.
//   - Actions (replay, export, purge, outbox redrive) are POSTs that first
//     show a dry run saying how many messages they will touch. The dry run's
//     scope and count are kept on the server as a plan; confirming runs the
//     plan once, in the background, never on more messages than it
//     counted, and redirects to the result page, which shows the action's
//     progress until it ends; reloading a page never repeats an action.
//
// Routes: GET / (overview; ?refresh=off stops the refresh), GET
// /dlq?queue=NAME (open a queue by name), GET /dlq/{queue} (groups), GET
// /dlq/{queue}/group/{id}, GET /dlq/{queue}/message?id=EVENT_ID (or
// ?pos=N), POST /dlq/{queue}/replay|export|purge, GET /outbox, POST
// /outbox/redrive, GET /results/{id}, GET and POST /login, POST /logout,
// GET /static/console.css. docs/adr/console-actions.md explains the
// actions' design.
//
// Reading a dead-letter queue uses package dlqtool, which reads by
// consuming without acknowledging: two reads of one queue at once would
// each see part of it. The console therefore runs one operation per
// queue at a time; the overview, which refreshes, never reads a DLQ.
//
// Safety: it listens on localhost by default. Access can need a token
// (a bearer header, or the login form, which starts a session: a random
// id in an HttpOnly SameSite=Strict cookie, ended by logout, after 12
// hours and with the process) or basic auth. Five wrong tokens or
// passwords from one address within a minute lock that address out for
// the rest of the minute. Every POST needs a CSRF token bound to a cookie
// by an HMAC with a per-process secret and must come from the same
// origin; read-only mode refuses every action; URLs and secret-looking
// header values are masked before they are rendered.
package console
