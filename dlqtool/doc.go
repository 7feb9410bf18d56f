// Package dlqtool is the operator's side of dead letters: the library behind
// `warren dlq` (list, show, stats, replay, purge, export and import), for
// tools and runbooks that inspect and repair a consumer's dead-letter queue.
// It reads dead messages through the protocol in package
// github.com/warrenmq/warren/dlq ([dlq.ParseMetadata], [dlq.StripDeaths]);
// a service that only consumes needs that package, not this one.
//
// [Open] a consumer's dead-letter queue on a connection you own, then:
//
//   - [Queue.Peek], [Queue.Stats] and [Queue.Export] read it and leave it as
//     it was: every message they read is handed back to the broker in its
//     place.
//   - [Queue.Replay] sends messages back to the queue the DLQ belongs to
//     (never to one a message's headers name: a producer can forge them),
//     through the default exchange, each removed from the DLQ only after
//     the broker confirmed its copy; an interrupted replay loses nothing.
//     The copy carries none of the broker's death headers
//     ([dlq.StripDeaths]), or its first retry could be dropped as a
//     dead-letter cycle.
//   - [Queue.Purge] deletes messages; [Queue.ImportFile] publishes an
//     export file back, checking every line first and then holding one line
//     at a time ([Queue.Import] takes messages read with [ReadMessages]):
//     exactly as exported into a DLQ; into any other queue with the failure
//     record reset as a replay resets it, so the consumer gives it a full
//     set of attempts. Messages naming another origin than the DLQ's
//     queue are imported only into a target the caller names.
//
// An export is JSON Lines, one [Message] a line ([Message.MarshalJSON]),
// every AMQP header value kept with its type so an import restores it
// exactly.
//
// A message whose headers the AMQP client cannot read (dlq.HeaderUnreadable,
// docs/adr/025-unreadable-headers.md) is read like any other, with that header
// in place of the entries it could not read: shown, exported, replayed and
// purged with them, never a failure of the whole queue.
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
package dlqtool
