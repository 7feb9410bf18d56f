// Package amqpx holds the AMQP plumbing that the consumer, the relay and the
// dead-letter tooling share: dialing with backoff and a connection name,
// redacting URLs for logs, and a [Publisher] that reports a publish as done
// only when the broker has confirmed it and did not return it as
// unroutable; and [Bound], which puts a deadline on round trips that
// amqp091-go would wait for forever.
//
// It is internal because its API follows what warren's packages need, not
// what a general AMQP helper would offer.
package amqpx
