// Package dlq owns dead letters: the metadata headers every dead message
// carries (what failed, how, how often, where it came from) and, built on
// them, the library behind `warren dlq`: list, show, stats, replay, purge,
// export and import.
//
// The consumer writes the headers with [Stamp]; everything that reads a dead
// message goes through [ParseMetadata], which also understands RabbitMQ's own
// x-death header, so a message that expired in its queue (and so never
// passed through warren's code on its way to the DLQ) is still classified.
package dlq
