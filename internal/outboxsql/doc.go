// Package outboxsql is what package outbox lends warren's own readers of
// its table (the two relays, the test kit outboxtest, the benchmarks) and
// keeps out of its public API: the select list that reads a whole row,
// the scanner of that list, the fencing token of a claim on Plane's
// table, and the error text a relay stores.
//
// ScanRow and RowColumns need outbox's types, and outbox imports this
// package, so they cannot be written here: package outbox lends them at
// init ([Lend]), and callers name the types (ScanRow[outbox.Row]). A
// mismatched type panics at the first call, so every test that reads a
// row catches it.
package outboxsql
