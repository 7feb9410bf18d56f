// Package capture writes a table's changes to the outbox from triggers
// that it generates: every INSERT, UPDATE and DELETE on the table, by
// whatever code path (ORM, raw SQL, bulk jobs, migrations), writes its
// events in the same transaction.
//
// It replaces the hand-written triggers of Plane's phase 1 and their
// flaws. The column lists are read from the catalog once, when the
// trigger is generated, and written into it: nothing consults
// information_schema at run time. A failed outbox insert is never
// swallowed: by default it fails the statement ([Fail]); with [Record] the
// statement succeeds and the failure is written to the outbox's capture
// errors table ([outbox.Table.CaptureErrorsTable]), which outbox.Stats,
// `warren outbox stats` and the relay's metrics count; but an error that
// a retry would cure (serialization failure, deadlock, lock timeout) still
// fails the statement. An update writes an event when a tracked column's
// text form changed, which its JSON is made from: numeric 1.0 to 1.00 and
// a change of case under citext are changes. And there is one
// generated function per table instead of a copy per entity.
//
// # Events
//
// For a [Spec] with EventPrefix "workitem":
//
//   - an inserted row: workitem.created, payload {"data": the row,
//     "previous_attributes": null};
//   - an updated row: workitem.updated, {"data": the new row,
//     "previous_attributes": the old values of the tracked columns that
//     changed, and only those}; no event when no tracked column changed;
//   - a soft delete (the soft delete column going from NULL to a value):
//     workitem.deleted, shaped like an update;
//   - a deleted row: workitem.deleted, {"data": the old row,
//     "previous_attributes": null}; none for a row already soft deleted,
//     whose event was written then;
//   - an update that changes a row's primary key: workitem.deleted for
//     the old key and workitem.created for the new one.
//
// "The row" is its tracked columns, as to_jsonb renders them. event_id is
// gen_random_uuid() (Postgres 13 or later); initiator_type and
// initiator_id come from the session settings warren.initiator_type
// (unset or empty: "USER") and warren.initiator_id, which the application
// sets per transaction:
//
//	SET LOCAL warren.initiator_type = 'SYSTEM.IMPORT';
//
// A Spec may name other settings; Plane's code sets plane.initiator_type.
// The events are the rows outbox.Publish would write, with the same
// NOTIFY, so a running relay publishes them as soon as the transaction
// commits.
//
// # Triggers
//
// The triggers are statement-level, with transition tables: an UPDATE of
// 10,000 rows runs one INSERT … SELECT of 10,000 events, pairing old and
// new rows by the primary key, instead of 10,000 trigger calls and
// inserts. devtools/bench's capture scenario measures them against the
// same statements without a trigger, and against row-level triggers. A
// table must have a primary key. TRUNCATE writes no events.
//
// # Installing
//
// [Generate] returns the SQL; [Install] applies it in one transaction and
// records it in [MigrationsTable] as the table's next version with its
// checksum. Installing an unchanged result again does nothing, unless
// what it created is no longer in place (a trigger dropped, lost with a
// rebuilt table, or disabled; the function dropped or edited): then it
// is applied again as the next version, and [Result.Repaired] says why.
// It locks the table before reading its columns. Because
// the trigger names its columns, run Install again after every migration
// that changes the captured table (in the same deploy step): a dropped or
// renamed tracked column makes the table's writes fail (Fail) or be
// recorded as capture errors (Record) until then, and a new column is not
// in the events until then. [Uninstall] drops the triggers and the
// function. `warren outbox capture` does all three from the command line.
package capture
