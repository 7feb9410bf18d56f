// Package engine holds what the polling relay (package relay) and the CDC
// relay (package relay/cdc) do alike once they hold a row: they differ in
// how rows reach them (a claim on the table, a logical replication
// stream) and how a published row leaves (a settle, a trim), not in how
// one is turned into a message.
//
// It is internal to relay/: users configure either relay, never the engine.
package engine
