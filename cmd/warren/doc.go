// Command warren operates a warren deployment: it inspects and replays
// dead letters, runs the outbox relay, and runs the demo.
//
//	warren dlq ls|show|stats|replay|purge|export|import   dead-letter queues
//	warren relay run                                     the outbox relay
//	warren outbox migrate|stats|dead|redrive|purge       the outbox table
//	warren demo                                          the whole pipeline, locally
//
// Connections come from flags or the environment: AMQP_URL, DATABASE_URL,
// REDIS_URL, with local defaults. Exit status: 0 success, 1 the operation
// failed, 2 the command line was wrong.
package main
