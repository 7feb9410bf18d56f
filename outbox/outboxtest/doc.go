// Package outboxtest lets a producer's tests assert what its code wrote to
// the outbox, inside the test's own transaction.
//
// A test begins a transaction, runs the code under test with it, asserts
// with [RequireEvent] (or reads every event with [Events]) and rolls back:
// nothing is committed, so no relay ever sees the rows and the test leaves
// the table as it found it. The reads see what the transaction wrote
// itself plus what other transactions had committed, as any statement in
// the transaction would.
//
// The package needs Postgres (the outbox is a table), never a broker: it
// imports neither the relay nor an AMQP client.
package outboxtest
