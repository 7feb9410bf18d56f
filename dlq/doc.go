// Package dlq is warren's dead-letter protocol: the metadata headers every
// dead message carries (what failed, how, how often, where it came from),
// the [Class] that says why it died, and the names of a consumer's
// dead-letter queue and exchange. It is what the consumer needs to write a
// dead letter and what anything that reads one needs to understand it; it
// depends on nothing but the AMQP client's types.
//
// The consumer writes the headers with [Stamp]; everything that reads a dead
// message goes through [ParseMetadata], which also understands RabbitMQ's own
// x-death header, so a message that expired in its queue (and so never
// passed through warren's code on its way to the DLQ) is still classified.
//
// RabbitMQ's death headers (x-death, x-first-death-*, x-last-death-*) never
// leave warren on a client publish: [StripDeaths] removes them from every
// retry, deferral and dead letter the consumer publishes, and the DLQ tools
// remove them from a replay and from an import into a queue that is not a
// DLQ. With an x-death that names the consumer's queue (a dead message moved
// back there by a shovel or an import), the retry tier's dead-letter back to
// the queue is a cycle to the broker, which drops the message without a
// trace. What they said about the message's own queue is kept, once, in
// x-warren-first-death-*, and read back as [Metadata].FirstDeath. The
// decision is in docs/adr/018-dlq-death-headers.md.
//
// Headers are written by whoever publishes. [StripHistory] removes every
// header of the failure record, warren's and the broker's; the consumer
// applies it to what producers publish, so that history is only ever what
// warren stamped.
//
// The operator's tools built on this protocol (peek, stats, replay, purge,
// export and import, behind `warren dlq`) are package
// github.com/warrenmq/warren/dlqtool, kept apart so that a service that
// only consumes does not link them.
package dlq
