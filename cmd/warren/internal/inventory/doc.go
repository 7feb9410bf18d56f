// Package inventory finds warren's consumers on a RabbitMQ broker and reads
// their queues' depths, consumers and rates, for the operator's tools
// (`warren console`, `warren dlq stats` without --queue), and which queues
// an exchange's events reach through its bindings (`warren contracts
// asyncapi --broker`).
//
// AMQP cannot list queues, so it reads RabbitMQ's management HTTP API
// (the rabbitmq_management plugin, which scripts/services.sh enables). A
// consumer is found by the topology warren declares for it: every queue
// named N.dlq is the dead-letter queue of consumer N, whose queue is N (or
// its partitions N.p0, N.p1, ...) and whose retry tiers are N.retry.*.
//
// The management API refreshes its figures every few seconds
// (collect_statistics_interval, 5 s by default): what it reports lags the
// queues by that much, which is fine for a page that refreshes itself and
// wrong for anything that must be exact — the DLQ tools count a queue with
// a passive declare when the count matters.
package inventory
