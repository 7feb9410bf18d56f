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
// [Open] a consumer's dead-letter queue on a connection you own, then:
//
//   - [Queue.Peek], [Queue.Stats] and [Queue.Export] read it and leave it as
//     it was: every message they read is handed back to the broker in its
//     place.
//   - [Queue.Replay] sends messages back to the queue they failed in,
//     through the default exchange, each removed from the DLQ only after
//     the broker confirmed its copy; an interrupted replay loses nothing.
//   - [Queue.Purge] deletes messages; [Queue.Import] publishes messages
//     read back from an export with [ReadMessages].
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
