// Package postgres is a [dedup.Store] on PostgreSQL (pgx/v5): one table
// holds every lease and done-mark, one row per key, and Postgres's clock
// decides when a lease or a retention ends, so replicas whose clocks
// disagree still agree on the store.
//
// A claim is one INSERT … ON CONFLICT statement that creates the key's row,
// takes over a row whose lease or retention has ended, or reports the row
// it found as done or busy. Complete and Release are fenced by the claim's
// token, so a claimer whose lease was taken over cannot mark or free the
// new holder's key. A key longer than 512 bytes, or one that Postgres text
// cannot hold (a NUL byte, invalid UTF-8), is stored as its SHA-256, so a
// hostile event ID cannot make its event's claims fail.
//
// The store is also a [dedup.Transactor]: [Store.WithinTx] runs a handler
// in a transaction, hands it the transaction through the context ([Tx]),
// and writes the done-mark in that same transaction. The handler's writes
// and the mark commit together or not at all, so a crash between the
// commit and the message's ack leaves a key that is done, and the
// redelivery is answered as a duplicate instead of running the handler's
// writes a second time.
//
// # Batching
//
// Calls that goroutines make at the same time share round trips and
// commits: a call that finds the store idle goes out at once, and the
// claims, completions and releases that arrive while batches are in flight
// go out together in the next one — one statement per kind, one round
// trip, one transaction, one flush of the log (Config.MaxBatch,
// Config.MaxBatchesInFlight). A batch first takes a transaction-level
// advisory lock on each of its keys, in one order, so that the batches of
// replicas that share keys wait for one another instead of deadlocking.
// If anything fails a batch, each of its calls is sent again on its own,
// so one key's failure fails that call alone; every kind of call is
// idempotent, so this is safe after a batch that committed but whose
// reply was lost. A claim whose caller has stopped waiting is not sent
// again. The transactional mode's done-mark is not batched: it belongs to
// the handler's transaction. docs/adr/016-dedup-batching.md has the
// measurements.
//
// [Store.Migrate] creates the table (embedded schema.sql, idempotent) and
// refuses one that is UNLOGGED, or has an UNLOGGED partition: Postgres
// empties such a table when it recovers from a crash, and every event
// redelivered after that would be handled twice.
//
// [Store.WithinTx] commits with synchronous_commit on, whatever the role
// or database sets: the consumer acks once it returns, and a commit a
// crash takes back afterwards would lose the handler's writes with no
// copy of the event left to redo them.
//
// [Store.Purge] deletes rows that mean nothing any more, in batches.
//
// # What would still break it
//
//   - A table made UNLOGGED after Migrate ran is not seen until the next
//     Migrate; a crash then empties it.
//   - [Store.Complete] commits at the role's synchronous_commit: under
//     off, a crash just after it may take the done-mark back. The message
//     is acked by then, so this costs a second handling only if the
//     broker delivers the event again.
package postgres
