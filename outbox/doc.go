// Package outbox is the write side of warren's transactional outbox on
// Postgres: what a producer needs to record an event in its own
// transaction, and what an operator needs to create, inspect, redrive and
// trim the table. It links pgx and package warren, never an AMQP client:
// writing a row is not publishing. Package relay is the process that
// moves the rows to RabbitMQ.
//
// # Writing
//
// A producer writes its business change and the event in one transaction:
//
//	tx, _ := pool.Begin(ctx)
//	// ... INSERT/UPDATE the business rows on tx ...
//	outbox.Publish(ctx, tx, ev) // takes a pgx.Tx, never a pool
//	tx.Commit(ctx)
//
// One commit decides both. A NOTIFY rides in the same transaction when no
// other row is due, so an idle relay hears of the event the moment it
// commits, and never of one that rolled back; a busy one finds it by the
// poll that follows each claim. Postgres commits transactions that
// notified one WAL flush at a time, which is why they do not notify while
// rows are due ([NotifyWhenIdle], the default of Options.Notify, says why
// no event waits longer than the relay's poll). event_id is unique in the table; publishing an event
// twice stores it once. [PublishBatch] writes many events in one
// statement. The relay publishes each row at least once, so consumers must
// be idempotent on event_id (warren's dedup middleware is).
//
// [Publish] and [PublishBatch] write to [DefaultTable]; [New] returns a
// [Table] for any other name, whose methods do the same and more.
//
// Package outbox/capture writes events from triggers instead: every
// change to a captured table, by whatever code path, writes its events in
// the changing transaction.
//
// # Operating
//
// [Table.Migrate] creates and upgrades the table from embedded, versioned
// migrations, and [Table.CheckSchema] says whether it is at this build's
// [SchemaVersion]. Migrate does not take its migrations record's word
// alone: a table dropped while the record remained is created again,
// empty, and reported (MigrateResult.Recreated; "warren outbox migrate"
// says the events it held are gone), since producers cannot commit until
// it exists and its rows are lost either way; a table that lost or
// changed a column, index or constraint its migrations made is refused
// with an error (wrapping [ErrSchema]) naming each, since its rows are
// kept and which repair fits is the operator's call. What the migrations
// make is compared by definition, not name: the steps are applied to a
// temporary scratch table in a savepoint that is rolled back, and its
// columns (name, type, NOT NULL), constraints (pg_get_constraintdef) and
// indexes (uniqueness and pg_get_indexdef from USING on) must all be on
// the table; what an operator added beside them is allowed. CheckSchema,
// which a relay runs at start, makes the same check after the record's
// version. Both, and [Table.CheckPlane], refuse an UNLOGGED table or
// partition, or migrations record: Postgres empties one when it recovers
// from a crash or an immediate shutdown, and every event not yet
// published would go while the writes it describes stay (a lost record
// keeps every relay from starting until the table is migrated again). A record dropped while the table kept everything the steps
// make is recorded again; a table renamed away is named by where its
// indexes went. [Table.Stats] reports depth, age, in-flight and dead
// counts; [Table.Dead] lists the rows the relay gave up on and
// [Table.Redrive] gives them another round; [Table.Purge] trims finished
// rows in batches and never deletes a batch its archive hook failed to
// keep. "warren outbox" runs the same operations from the command line.
//
// # Plane's outbox table
//
// [Open] with Options.Schema [SchemaPlane] gives the operations on Plane's
// own outbox table, which Plane's triggers write and the relay drains in
// place (see package relay). Its rows are read through expressions that
// yield a warren row's columns, so [Row] serves both: a processed row is
// Delivered, available_at is the end of its claim's lease, Claims is the
// claim's fencing token (claimed_at in microseconds). [Table.CheckPlane] checks Plane's columns and
// whether warren's optional migration is applied; [Table.Migrate] applies
// it (additive columns warren_attempts, warren_last_error,
// warren_dead_at and three partial indexes built concurrently, recorded in
// "<table>_warren_migrations"). [Table.Stats] works either way and counts
// lapsed claims; [Table.Dead] and [Table.Redrive] need the migration
// ([ErrPlaneMigrationNeeded]); [Table.Publish] and [Table.Purge] refuse
// ([ErrPlaneRowsAreKept]): Plane's triggers write the rows and Plane's
// cleaner deletes them.
//
// # Testing
//
// Package outbox/outboxtest asserts, inside a test's transaction, what the
// code under test wrote to the outbox.
//
// # What would still break it
//
//   - The comparison with the steps leaves out column defaults, identity
//     and a NOT VALID check that was never validated against one that was:
//     a default dropped, or a table whose rows break a check the steps
//     added NOT VALID, passes.
//   - A table changed between CheckSchema and the relay's first claim, or
//     while it runs, is seen only by the statements that then fail; one
//     made UNLOGGED under a running polling relay is not seen at all until
//     the relay starts again.
//   - CheckSchema, the relay's start, does not require the CHECK
//     constraints (Migrate does): a relay drains a table whose checks a
//     DBA dropped, and rows written around them die as undecodable.
//   - CheckSchema and Migrate compare by definition through a temporary
//     table: for a role without TEMP on the database, or in a read-only
//     transaction, that comparison is skipped, and only the table and the
//     names of what its steps make are checked.
//   - On a SchemaPlane table, warren's columns are checked against the
//     record by name and type only, its indexes by name and validity; Plane's
//     own columns by name and type. A Plane table re-created with some of
//     warren's columns is refused, not repaired.
package outbox
