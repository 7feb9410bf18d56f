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
//   - an update that changes a row's primary key, or its EntityIDColumn:
//     workitem.deleted for the old entity and workitem.created for the
//     new one.
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
// # Another producer's events
//
// A Spec's shaping options make the events another producer's: Ignore
// (columns whose change alone writes nothing), UpdateVerbs (an update of
// state_id is workitem.state.updated), CreatorColumn and ModifierColumn
// (initiator_id from the row), Enrich (arrays read from link tables), Kind
// (another prefix, and conversion events, by a lookup: Plane's epics),
// Shape ([ShapePlane]: Plane's "{}" strings and text-cast old values),
// Verbs (added, moved, removed instead of created, updated, deleted),
// ChangedEntityType, PreviousRow (the whole old row on update), Only
// (events for one kind of row: Plane's attachments among its files),
// Parent (the rows are about a parent entity, whose kind and row they
// carry: Plane's comments) and Link (the rows are links of the parent,
// whose .added and .removed events they write: Plane's issue_assignees).
// The Plane* functions set them for each of Plane's tables with triggers
// (issues, states, labels, assignees, issue labels, comments, links,
// relations, attachments, cycle and module memberships); the tests in plane_test.go
// compare their events, field by field, with those of Plane's trigger
// behaviour reproduced from its source, and docs/plane.md lists where
// they differ on purpose. Every
// table and column these options name is checked in the catalog and
// quoted; a type the generated comparisons could not use (a link column
// of another type than the entity id, a flag that is not boolean) is
// refused when the trigger is generated rather than failing the table's
// writes.
//
// What would still break them: a link or lookup table altered after the
// install (a renamed or retyped column fails every write of the captured
// table (under Record, records its failure) until capture runs again;
// Install's repair check does not watch
// those tables), a writer without SELECT on them (the write fails with a
// permission error), and a link table without an index on its link
// column (every event scans it).
//
// # Triggers
//
// On a plain table the triggers are statement-level, with transition
// tables: an UPDATE of 10,000 rows runs one INSERT … SELECT of 10,000
// events, pairing old and new rows by the primary key, instead of 10,000
// trigger calls and inserts. devtools/bench's capture scenario measures
// them against the same statements without a trigger, and against
// row-level triggers. A table must have a primary key, not DEFERRABLE
// (two rows of a transaction could share a key between statements, and
// pairing by it would write the wrong events), and an EntityIDColumn must
// be NOT NULL.
//
// Every way to write a captured row writes its events, or is refused:
//
//   - A partitioned table, a partition and an inheritance child get
//     row-level triggers, which PostgreSQL clones to every partition,
//     present and future (created or attached later), and which fire for
//     statements that name a partition, the parent, or an inheritance
//     parent. An UPDATE that moves a row to another partition changes its
//     key (the partition key is part of it): .deleted and .created, as any
//     key change. A table with inheritance children, or with a foreign
//     table among its partitions, is refused. A statement-level capture
//     has a guard: a row-level trigger with a transition table that never
//     fires (WHEN (false)), which PostgreSQL does not allow on a partition
//     or an inheritance child, so ALTER TABLE … ATTACH PARTITION and
//     INHERIT refuse the captured table ("trigger warren_capture_guard
//     prevents table … from becoming a partition"): its statement-level
//     triggers would not fire for statements naming the new parent.
//     Uninstall, make the change, and install again (row-level then).
//   - COPY, INSERT … ON CONFLICT, MERGE and foreign-key cascades (ON DELETE
//     / ON UPDATE CASCADE, SET NULL) fire the same triggers.
//   - TRUNCATE of the table or of a partition present at the install is
//     refused, with a hint: DELETE writes the events.
//   - The triggers are ENABLE ALWAYS: they fire under
//     session_replication_role = replica (bulk loaders, restores, logical
//     replication's workers). What a logical replication worker's writes do
//     is [Spec.Subscriber]: refuse them (the default), capture them, or
//     skip them because the publisher captures the same table. A
//     statement-level capture adds three row-level triggers enabled for
//     replica sessions only, since the apply worker fires no
//     statement-level triggers. See docs/adr/024-capture-replication-role.md.
//
// # Generated SQL
//
// No text from the catalog or the Spec reaches the SQL but through
// quoting: identifiers as quoted identifiers, text as string literals (an
// escape string with doubled backslashes when it holds one, so it means the same
// whatever standard_conforming_strings is), the comments are fixed text
// (what the capture is about is the function's COMMENT, a literal), and the
// function body's dollar quote is a tag the body does not contain.
// FuzzGenerateQuotesEverything installs the SQL for fuzzed column names and
// spec text and checks it creates the function and its triggers and nothing
// else. The function runs with search_path = pg_catalog, pg_temp and names
// every function it calls with its schema, so a look-alike on the writing
// session's search_path is never what it calls.
//
// It also pins the settings the columns' text forms depend on, which the
// change test and the payload are made of: extra_float_digits = 3 (below
// 1 rounds floats, so a changed float wrote no event), bytea_output = hex,
// IntervalStyle = postgres, DateStyle = 'ISO, MDY', TimeZone = 'UTC' and
// lc_monetary = 'C'. Change note: before this, a timestamptz was rendered
// in the writer's TimeZone ("…+02:00") and a money value in its
// lc_monetary; from the first Install with this version, timestamptz
// values are rendered in UTC ("…+00:00", the same instant) and money as in
// the C locale, whatever the writer's session says.
//
// Install trusts only what it owns. It refuses ([ErrNotOwned]) to reuse
// an object it did not create unless the installing role (current_user)
// owns it: the trigger function (CREATE OR REPLACE keeps a planted
// function's owner, who could later change what every writer runs), the
// migrations table (named with its schema, the first on the installer's
// search_path), the outbox and (under Record) the capture errors table; and a reused
// table must have no triggers or rules, which would run as the installer
// or as the captured table's writers. (A trigger on the outbox is also
// another capture of it: capturing into it would loop.) The outbox, its
// capture errors table and the migrations table cannot be captured.
//
// # What would still break it
//
//   - A superuser or the table's owner: ALTER TABLE … DISABLE TRIGGER (ALL)
//     — which pg_dump --disable-triggers emits for data-only restores —,
//     DROP TRIGGER, or editing the function. Writes in between have no
//     events; the next Install reports and repairs it, nothing sooner.
//   - DDL that moves rows into, out of or within a captured table without
//     a DML statement, which fires no trigger: ALTER TABLE … DETACH
//     PARTITION (also CONCURRENTLY) and DROP TABLE of a partition remove
//     its rows, ATTACH PARTITION of a table that has rows adds them, ALTER
//     COLUMN … TYPE … USING rewrites them; none writes an event. Only an
//     event trigger could refuse them, and creating one needs a superuser:
//     it is the operator's option (ddl_command_start on ALTER TABLE and
//     DROP TABLE of a captured table), not something Install builds.
//   - A detached partition keeps the capture's TRUNCATE trigger (TRUNCATE
//     triggers are each partition's own), so its TRUNCATE is still
//     refused; Install ignores it, Uninstall drops it with the function.
//     DROP TRIGGER warren_capture_truncate ON it to allow TRUNCATE.
//   - Capture installed with Subscriber skip on a subscriber whose publisher
//     does not in fact capture the table: the replicated writes have no
//     events anywhere. It is the operator's declared choice.
//   - TRUNCATE of a partition created or attached after the last Install
//     (TRUNCATE triggers are not cloned): it removes rows without events.
//     Install again after adding partitions; the check reports the
//     partition's missing trigger.
//   - An inheritance child added to a captured table after the install
//     (CREATE TABLE … INHERITS, ALTER TABLE child INHERIT it; the guard
//     only stops the captured table becoming a child): statements naming
//     the child write no event. The next Install refuses the table.
//   - A column added, dropped or renamed without running Install again
//     (see Installing).
//   - Writes that bypass triggers entirely: a restore of the table's files,
//     a physical replica promoted, pg_upgrade of a cluster (all carry the
//     outbox rows too, so what committed stays consistent).
//   - A type's own output or cast functions (the text and JSON form of a
//     column) run as the writer: the capture trusts the types of the table
//     it captures. A setting that changes a type's text form and is not
//     among the pinned ones (an extension type's own) still changes the
//     payload with the writer's session.
//   - Capturing both a partitioned table and one of its partitions: two
//     events per write of that partition.
//   - Soft deletes judge a row by its soft delete column alone: a row
//     inserted already soft deleted gets .created and its later DELETE no
//     event; a soft delete that also moves the row to another partition
//     reads .deleted then .created; undoing one (back to NULL) is an
//     .updated; a soft delete column that is never NULL for live rows (a
//     boolean false) makes every DELETE eventless. A NOT NULL column is
//     refused as the soft delete column and not taken by its name.
//   - A capture trigger renamed (ALTER TRIGGER … RENAME): Install makes
//     the missing one again and the renamed one still calls the function,
//     so each write has two events with different ids. Uninstall of a
//     renamed table finds no capture by its new name.
//   - The repair check does not compare the function's SECURITY DEFINER,
//     owner or language.
//   - A captured table, or under Record the capture errors table, made
//     UNLOGGED after the install (the next Install refuses it, as it
//     refuses an UNLOGGED or TEMP table or partition from the start): a
//     crash empties it without .deleted events, or without the record of
//     the changes whose events were never written.
//   - `--print`'s SQL does not check who owns an existing function of its
//     name (Install does): applied by hand over a planted function, its
//     CREATE OR REPLACE keeps the planter as owner.
//   - DDL that changes what rows say without DML: ALTER TYPE … RENAME
//     VALUE of an enum, a composite type's attribute renamed.
//   - Record on a row-level (partitioned) capture catches per trigger call,
//     so per row: a write of N rows opens N subtransactions, each taking
//     an XID when it writes an event, and past 64 in one transaction
//     every concurrent snapshot overflows its subtransaction cache. Bulk
//     writes to a partitioned table under Record pay that; Fail does not.
//   - A superuser can still plant or alter what Install then trusts. A
//     role other than the one that installed must take ownership (ALTER …
//     OWNER TO) before it can install again: Install trusts current_user
//     only, not the roles it is a member of.
//   - A PostgreSQL release that clones a trigger to a partition created
//     later as ENABLE (origin sessions only) instead of keeping ALWAYS
//     (15.20, where the tests ran, keeps it): writes to that partition
//     under session_replication_role = replica have no events until the
//     next Install, which reports the clone.
//
// # Installing
//
// [Generate] returns the SQL; [Install] applies it in one transaction and
// records it in [MigrationsTable] as the table's next version with its
// checksum. Installing an unchanged result again does nothing, unless
// what it created is no longer in place (a trigger dropped, lost with a
// rebuilt table, disabled or enabled for origin sessions only; a
// partition's; the function dropped or edited): then it is applied again
// as the next version, and [Result.Repaired] says why: each trigger is
// compared by what it does (level, timing, events, WHEN clause, column
// list, transition tables, function, enabled state), not only its name;
// the function by its body and settings. An install made by
// an older warren has other SQL, so Install replaces it.
// It locks the table before reading its columns, and gives up after
// [Spec.LockTimeout] (default outbox.DefaultLockTimeout) with a 55P03
// error naming the sessions holding the table, rather than queue every
// writer of the table behind its LOCK TABLE. Install and Uninstall refuse
// a function that triggers outside the table's partition tree call: the
// function is named after the table's name, so a captured table renamed
// away keeps calling the function a new table of the old name would
// replace (install the renamed table's capture under its new name first).
// Installing a captured table with another outbox is refused unless
// [Spec.MoveOutbox]. `--print` prints the SQL in BEGIN; LOCK TABLE …;
// COMMIT, as Install applies it (but not recorded). Because
// the trigger names its columns, run Install again after every migration
// that changes the captured table (in the same deploy step): a dropped or
// renamed tracked column makes the table's writes fail (Fail) or be
// recorded as capture errors (Record) until then, and a new column is not
// in the events until then. [Uninstall] drops the triggers and the
// function. `warren outbox capture` does all three from the command line.
package capture
