// Package cdc is the outbox relay that streams: instead of polling the
// outbox table, claiming rows with an UPDATE and settling them with a
// DELETE, it reads the table's inserts from Postgres's write-ahead log
// through logical replication (the pgoutput plugin, with
// github.com/jackc/pglogrepl) and publishes them to RabbitMQ as the
// polling relay does: the same envelope, publisher confirms, mandatory
// routing. Producers are unchanged: they write with outbox.Publish in
// their own transactions. "warren relay run --mode cdc" runs it as a
// sidecar.
//
// It needs wal_level = logical on the server (scripts/services.sh sets it
// for the local services; docs/cdc.md says how on managed Postgres) and a
// role allowed to replicate.
//
// # What it guarantees
//
// At least once, never less. The relay keeps three positions in order:
// what the stream has delivered, what the broker has confirmed, and what
// has been trimmed. A row is deleted from the table only after the broker
// confirmed its message (and did not return it), in a transaction that
// commits synchronously; only after that commit does the relay tell
// Postgres that the slot may move past the row's transaction. A relay that
// dies at any point (kill -9 included) leaves the slot where every event
// before it is confirmed and trimmed, and the next relay streams again
// what came after: those events may be published twice, never lost.
// Consumers must be idempotent on event_id; warren's dedup middleware is.
//
// How many twice: after any end of a session (a stop, a kill, a lost
// connection, a PublishTimeout, a nack streak), at most what that relay
// had published and not yet settled, (BatchesInFlight + 1 + 2×4) ×
// BatchSize events (6,500 at the defaults), whatever the size of the
// transactions. The slot moves only past whole transactions, so a
// session that ends inside one leaves the whole of it to be streamed
// again, though its first batches are published and trimmed. The trim is
// the record of what was published: each settle also records, in its own
// transaction, the commit position of the latest transaction it settled
// rows of (settled_lsn in the state table), and a later session reads the
// rows of every transaction at or before that position from the table
// (one query a batch) and publishes only those still pending. So every
// session gets further through a transaction of any size than the one
// before, and the slot passes it. Transactions no session settled a row
// of are published from the stream, with no read.
//
// The stream delivers a transaction once its commit is flushed to the
// WAL, a moment before other sessions can see it; the relay publishes
// its events only once they can (a trim any sooner would not see the rows
// and leave them pending for ever), so a consumer that reads the database
// when an event arrives sees the change the event describes.
//
// Order: the stream is in commit order, and one relay publishes it in that
// order on one channel, so events reach the exchange in the order their
// transactions committed, and within a transaction in the order they were
// written. Batches are published ahead of their confirms
// (Config.BatchesInFlight), in order on that one channel. Two exceptions:
// an event the broker refused is published again after the events behind
// it in its batch and in the batches sent after it before the retry, and
// after a restart the events
// since the last flushed position come again, after the ones that were
// already delivered. A consumer that needs per-entity order therefore
// still needs its dedup and its own versioning.
//
// The table stays small: a row lives from its producer's commit until the
// broker confirms it, a batch of milliseconds while the relay keeps up.
// Rows pile up only while the relay cannot publish; they are the same
// rows "warren outbox stats" counts, and the oldest one's age is the
// relay's lag in time (see docs/adr/020-cdc-relay.md for why rows are trimmed
// behind the confirmed position rather than deleted by their producer).
//
// # Failures
//
// An event the broker returns as unroutable is published again, the
// stream waiting, up to MaxAttempts; then it is made dead in the table,
// where "warren outbox dead" lists it and "warren outbox redrive" turns
// it back to pending. The publication carries updates too, so a redrive
// reaches the relay through the stream. An event that cannot be encoded,
// whose message would exceed MaxMessageBytes, or whose properties and
// headers (entity_id, initiator_type and tracestate are headers) would
// exceed amqpx.MaxContentHeader, is dead at once: published, a content
// header over frame_max makes the broker close the connection, and every
// session would meet the same row first, for ever. A settle that waited
// too long (a lock on the table past its timeout) is tried again while the
// session lives, the publisher waiting meanwhile, rather than end the
// session; any other failed settle ends it, since a PostgreSQL shutting
// down ends the settle's connection and then waits for the relay's
// walsender, which waits for a position only a settle can report. A nack
// spends no attempt: RabbitMQ nacks mostly for its own passing state (a
// queue full with reject-publish, a quorum queue without a leader), so a
// nacked event is dead only once it has been nacked for NackTimeout (30s),
// counted across sessions that end on nacks; the stream waits meanwhile,
// and each retry gives the queues that did take the event another copy. A session whose every
// verdict for one destination (exchange and routing key) has been a nack
// for amqpx.NackedSessionLimit (5s), whatever its other destinations'
// verdicts, ends, the next one publishing on a new channel.
//
// A lost connection, to Postgres or to the broker, or a batch without its
// confirms within PublishTimeout, ends the session; the relay starts
// again from the slot's position, waiting between tries. While the broker
// is away the slot does not move and Postgres keeps the WAL behind it:
// [Status] reports that lag in bytes, and max_slot_wal_keep_size bounds
// it (a slot that falls behind that bound is lost, and needs
// [DropSlot] and a new one, whose backfill publishes what is pending).
//
// # Policy
//
// What each verdict costs an event; package relay's documentation has the
// polling relay's table, with the same rows, and
// docs/adr/027-relay-policies.md says why the two differ where they do.
//
//	confirmed                     row trimmed, synchronous_commit on, with the settled position
//	returned unroutable           an attempt; published again at once, the stream waiting
//	nacked                        no attempt; dead after NackTimeout (30s) of nacks
//	no confirm, channel lost      no attempt; the session ends and starts again from the slot
//	not sent, broker blocked      no attempt; the session ends
//	not encodable                 dead at once
//	MaxAttempts (5)               unroutable returns in one session, RetryMin 200ms doubling to RetryMax 5s
//
// # Several relays, one slot
//
// A slot has one reader. Every relay of a group names the same slot
// (Config.Slot); the first to start streams it and the others stand by,
// trying again every StandbyRetry, and one of them takes over within
// about that long after the streaming relay's connection ends, because
// Postgres releases the slot when its walsender sees the connection
// close. No second slot is made.
//
// The first relay of a group creates the publication, the slot and a
// small state table beside the outbox (its name with "_cdc" appended). A
// new slot streams only what commits after it exists, so that relay first
// publishes the rows already pending in the table (the backfill), and the
// state table records when it has, and up to which id: streamed rows at or
// below that id are read from the table, so a row the backfill published
// is not published again from the stream, whichever session meets it. It
// also holds settled_lsn (see What it guarantees).
//
// One table serves one group: a relay whose slot is not the one the state
// table records for a slot that still exists is refused
// ([ErrOtherGroup]), since each group trims the rows it published, which
// the other may not have published yet. A publication that does not
// publish the table now of that name (the table was rebuilt by a swap,
// and the publication follows the old one's OID) is refused too
// ([ErrNotPublished]): retire the group and start again, and the new
// slot's backfill publishes what the table holds. Switching a table from the polling
// relay to this one is therefore: stop the polling relays, start this
// one. [DropSlot] ("warren relay run --mode cdc --drop-slot") retires a
// group; rows still pending stay in the table for whichever relay comes
// next.
//
// # Seeing what happens
//
// [Relay.HealthHandler] serves /healthz and /readyz, [Relay.Health] the
// same as a value, and [Status] the slot's lag. Config.Observer receives
// what the polling relay's does (package relay's [relay.Observer]): every
// publish verdict, rows made dead once that is committed, and the table's
// stats every StatsInterval, and, if it implements [relay.BlockObserver],
// each broker block and unblock, so package warrenprom/relayprom serves
// both relays; package warrenprom/cdcprom adds the slot's gauges.
// Config.TracerProvider records a producer span per event, a child of the
// trace context the producer stored with the row.
//
// # What would still break it
//
// Outside what the tests model, these still cost duplicates, or stall:
//
//   - Sessions that end before they get past what is already trimmed: a
//     session streams a settled transaction again from its start (the
//     walsender decodes it whole) and reads its rows from the table a
//     batch at a time before it meets one still pending. On the test
//     machine a session streamed 27,000 such rows again and published
//     3,000 more in under a second; a relay whose sessions end faster
//     than it can skip (a broker that drops every connection within
//     moments) makes no progress through the transaction, and the slot
//     keeps the WAL behind it.
//   - Rows deleted by anything but the relay (by hand, or a polling relay
//     on the same table, which is not supported): a streamed row of a
//     settled transaction that is gone from the table counts as published.
//   - A state table set back by hand or restored from an older copy
//     (settled_lsn lower than what was settled): the rows of a
//     transaction partly published come again, every one. Set ahead, it
//     only costs reads.
//   - A relay that loses its replication connection while its settle
//     still commits on the pool: the relay that takes over may read
//     settled_lsn before that commit, and publishes that settle's rows
//     again (within the bound: they were published and not settled when
//     it started).
//   - A dead row redriven while its transaction is streamed again: it is
//     published from the table and again for the redrive's update.
//   - The bound is the ended relay's: BatchSize and BatchesInFlight of a
//     relay larger than its successor's leave more behind.
//   - Duplicates that are not a session's: a refused event's retry gives
//     the queues that took it another copy.
//   - A transaction held open for hours elsewhere in the database keeps
//     every version of the state row (one per settle), as it keeps every
//     trimmed outbox row, until it ends and vacuum catches up.
//   - A row the broker refuses by closing the channel or connection for a
//     reason the relay does not measure first (a broker frame_max below
//     128 KiB, a max_message_size below MaxMessageBytes): every session
//     ends at it, a hang. Make it dead by hand.
//   - An UPDATE of a pending row (other than a redrive) is published
//     again, the first copy with the payload before the update.
//   - Memory grows with BatchSize × row size while the broker nacks
//     (329 MB peak at BatchSize 50 with 900 KB events; about 4.5 GB
//     extrapolated at the defaults with 1 MiB events).
//   - Two groups whose first starts race both pass the one-group check.
//   - A lock on the table that outlasts the replication connection: the
//     session ends and the next republishes what was not trimmed.
//   - A settle that fails for a moment for any reason but a wait (a
//     pooled connection terminated by an administrator, a failover) ends
//     the session, and the next republishes what was not trimmed (within
//     the bound); the relay cannot tell a passing failure from a
//     shutdown that waits on it.
//   - A PostgreSQL shutdown while the session waits on the broker (a
//     batch's confirms, a connection the broker blocked) waits with it,
//     until the confirms come or PublishTimeout ends the session. Not
//     measured for a block that outlasts PublishTimeout.
//   - A smart shutdown (SIGTERM, pg_ctl -m smart) waits for every client
//     session to end, the relay's pooled connections among them: it does
//     not finish while the relay runs, as with any pooled client.
//   - A slot lost to max_slot_wal_keep_size: Run tries again for ever,
//     its error PostgreSQL's (SQLSTATE 55000, without the DETAIL that says
//     the slot was invalidated), [Relay.Health] not ready but alive, so a
//     liveness probe never restarts it. [DropSlot] and a new relay mend
//     it; the new slot's backfill publishes every pending row.
//   - A broker memory or disk alarm that outlasts PublishTimeout: the
//     relay reports the block (Health, the log, a BlockObserver) and is not
//     ready, but its session ends at PublishTimeout and the next one starts
//     unblocked until it publishes. So BlockedSince restarts with each
//     session and never says how long the alarm has lasted; a
//     BlockObserver is told Blocked and Unblocked once per session; each
//     timed-out batch counts as failed publishes, its error saying "no
//     confirm" without naming the block; and the events the block held
//     are published again (an attack with five events under a 20s alarm
//     delivered each twice).
//   - An Observer that blocks (see [relay.Observer]): publishing stops
//     while Health says ready, and Run's stop waits for it with the slot
//     held. One that panics is recovered and logged; one that calls
//     runtime.Goexit is logged, and stalls the relay the same way.
//   - An outbox or state table made UNLOGGED while a session streams is
//     refused ([ErrNotLogged]) only when the next session starts; a crash
//     in between empties it.
//
// docs/cdc.md gives the figures.
package cdc
