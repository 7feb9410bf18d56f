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
// relay's lag in time (see docs/adr/cdc-relay.md for why rows are trimmed
// behind the confirmed position rather than deleted by their producer).
//
// # Failures
//
// An event the broker returns as unroutable is published again, the
// stream waiting, up to MaxAttempts; then it is made dead in the table,
// where "warren outbox dead" lists it and "warren outbox redrive" turns
// it back to pending. The publication carries updates too, so a redrive
// reaches the relay through the stream. An event that cannot be encoded,
// or whose message would exceed MaxMessageBytes, is dead at once. A nack
// spends no attempt: RabbitMQ nacks mostly for its own passing state (a
// queue full with reject-publish, a quorum queue without a leader), so a
// nacked event is dead only once it has been nacked for NackTimeout (30s),
// counted across sessions that end on nacks; the stream waits meanwhile,
// and each retry gives the queues that did take the event another copy. A session whose every
// verdict has been a nack for amqpx.NackedSessionLimit (5s) ends, the next
// one publishing on a new channel.
//
// A lost connection, to Postgres or to the broker, or a batch without its
// confirms within PublishTimeout, ends the session; the relay starts
// again from the slot's position, waiting between tries. While the broker
// is away the slot does not move and Postgres keeps the WAL behind it:
// [Status] reports that lag in bytes, and max_slot_wal_keep_size bounds
// it (a slot that falls behind that bound is lost, and needs
// [DropSlot] and a new one, whose backfill publishes what is pending).
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
// is not published again from the stream, whichever session meets it. Switching a table from the polling
// relay to this one is therefore: stop the polling relays, start this
// one. [DropSlot] ("warren relay run --mode cdc --drop-slot") retires a
// group; rows still pending stay in the table for whichever relay comes
// next.
package cdc
