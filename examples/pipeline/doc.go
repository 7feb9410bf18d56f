// Package pipeline wires the examples into the whole warren path on real
// services: an application that writes work items and their events in one
// transaction, the outbox relay, a fanout exchange, the webhook and
// automation consumers, and a local webhook receiver. examples/demo runs it
// with a workload and shows what happens; the end-to-end test runs it and
// checks every event's fate.
//
// Everything it creates is named from Config.Names, so runs side by side
// do not meet, and Destroy removes it all.
package pipeline
