// Command warren operates a warren deployment: it inspects and replays
// dead letters, runs the outbox relay, and manages the outbox table. It
// links no example code: the demo is its own program, go run ./examples/demo.
//
//	warren dlq ls|show|stats|replay|purge|export|import   dead-letter queues
//	warren relay run                                     the outbox relay
//	warren outbox migrate|stats|dead|redrive|purge       the outbox table
//	warren console                                       the web console
//	warren contracts check|asyncapi                      event contracts in CI, the AsyncAPI document
//	warren --version
//
// Connections come from flags or the environment: AMQP_URL, DATABASE_URL,
// with local defaults. Human output names the broker or database first,
// passwords masked. Exit status: 0 success, 1 the operation failed, 2 the
// command line was wrong (a malformed URL included), 130 Ctrl-C stopped a
// command before it changed anything.
package main
