// Package dlq owns dead letters: the metadata headers every dead message
// carries (what failed, how, how often, where it came from) and, built on
// them, the library behind `warren dlq`: list, show, stats, replay, purge,
// export and import.
//
// The consumer writes the headers with [Stamp]; everything that reads a dead
// message goes through [ParseMetadata], which also understands RabbitMQ's own
// x-death header, so a message that expired in its queue (and so never
// passed through warren's code on its way to the DLQ) is still classified.
//
// RabbitMQ's death headers (x-death, x-first-death-*, x-last-death-*) never
// leave warren on a client publish: [StripDeaths] removes them from every
// retry, deferral and dead letter the consumer publishes, from a replay, and
// from an import into a queue that is not a DLQ. With an x-death that names
// the consumer's queue (a dead message moved back there by a shovel or an
// import), the retry tier's dead-letter back to the queue is a cycle to the
// broker, which drops the message without a trace. What they said about the
// message's own queue is kept, once, in x-warren-first-death-*, and read
// back as [Metadata].FirstDeath. The decision is in
// docs/adr/dlq-death-headers.md.
//
// [Open] a consumer's dead-letter queue on a connection you own, then:
//
//   - [Queue.Peek], [Queue.Stats] and [Queue.Export] read it and leave it as
//     it was: every message they read is handed back to the broker in its
//     place.
//   - [Queue.Replay] sends messages back to the queue they failed in,
//     through the default exchange, each removed from the DLQ only after
//     the broker confirmed its copy; an interrupted replay loses nothing.
//   - [Queue.Purge] deletes messages; [Queue.Import] publishes messages
//     read back from an export with [ReadMessages]: exactly as exported
//     into a DLQ, without the broker's death headers into any other queue.
//
// No operation waits for the broker without a deadline: a broker that does
// not answer a round trip in time (it stopped reading the connection, as
// RabbitMQ does to publishers during an alarm) has the connection closed
// under it, and the operation returns with what it got done; messages it did
// not finish stay where they were.
//
// Every operation takes a [Filter] (event-type prefix, error class, error
// text, age, event id) and reports [Progress]. The design decisions are in
// docs/adr/dlq-*.md.
package dlq
