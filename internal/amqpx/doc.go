// Package amqpx holds the AMQP plumbing that the consumer, the relay and the
// dead-letter tooling share: dialing with backoff and a connection name,
// redacting URLs for logs, and a [Publisher] that reports a publish as done
// only when the broker has confirmed it and did not return it as
// unroutable; and [Bound], which puts a deadline on round trips that
// amqp091-go would wait for forever.
//
// Every connection [Dial] opens reads through a frame filter: a message
// whose headers amqp091-go would refuse to read (nested more than 32 deep,
// a table or array of more than 8192 entries, a field of an unknown type,
// a content header over frame_max, of any size), which would otherwise
// close the connection at every delivery and stall the queue behind it for
// ever, arrives with those entries replaced by dlq.HeaderUnreadable saying
// why, every other property and the body kept. A content header over
// frame_max is read as it streams in, in bounded memory (its table is
// discarded, the properties around it kept). The filter reads exactly what
// the client refuses: room for warren's record in a retry or dead letter
// is made by the copy itself (dlq.Fit). For amqps the dialer does the TLS
// handshake itself, so that the filter reads plaintext frames. It costs
// about 0.1 µs a delivery (BenchmarkFrameFilter). See
// docs/adr/025-unreadable-headers.md.
//
// # What would still break it
//
// A refusal of the client outside a content header's properties (a method
// frame over frame_max, which the broker builds; a body frame); an
// amqp091-go upgrade that refuses more than frames.go mirrors; a
// connection to warren's queues not opened through Dial.
//
// It is internal because its API follows what warren's packages need, not
// what a general AMQP helper would offer.
package amqpx
