package outbox

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/warrenmq/warren/internal/pgdurable"
)

//go:embed migrations/*.sql migrations_plane/*.sql
var migrationFiles embed.FS

// migration is one embedded schema step, migrations/NNN_name.sql, where
// {table} and {table_suffix} stand for the quoted table name and the names
// of objects named after it.
type migration struct {
	version int
	name    string
	sql     string
	// index is set on a step that builds one index with CREATE INDEX
	// CONCURRENTLY: the {table_suffix} placeholder of its name. Such a
	// step cannot run in a transaction (see migratePlane).
	index string
}

// concurrentIndexRE is the one form a step that builds an index
// concurrently may take: a single statement, IF NOT EXISTS so that a rerun
// after a crash between the build and its version record is harmless, on
// the table itself, its name a placeholder the runner can look up.
var concurrentIndexRE = regexp.MustCompile(`(?is)^CREATE\s+INDEX\s+CONCURRENTLY\s+IF\s+NOT\s+EXISTS\s+(\{table_[a-z_]+\})\s+ON\s+\{table\}[^;]*;?$`)

var sqlCommentRE = regexp.MustCompile(`--[^\n]*`)

// indexOf returns the index placeholder of a step that builds one index
// concurrently, "" for a step that runs in a transaction, and an error
// for a step that uses CONCURRENTLY in any other form.
func indexOf(sql string) (string, error) {
	body := strings.TrimSpace(sqlCommentRE.ReplaceAllString(sql, ""))
	if m := concurrentIndexRE.FindStringSubmatch(body); m != nil {
		return m[1], nil
	}
	if strings.Contains(strings.ToUpper(body), "CONCURRENTLY") {
		return "", errors.New("a step that builds an index concurrently must be one statement, CREATE INDEX CONCURRENTLY IF NOT EXISTS {table_suffix} ON {table} …")
	}
	return "", nil
}

// sequence is one line of versioned migrations and the record of how far
// a table is along it.
type sequence struct {
	steps []migration
	log   string // the record's table, as a render template
	lock  string // the advisory lock key's prefix; the table name follows
	what  string // what the steps make, for messages
}

// warrenSequence creates and upgrades warren's own table. planeSequence
// adds warren's optional columns to Plane's table, which Plane's own
// migrations create: a separate line with a record of its own.
var (
	warrenSequence = sequence{
		steps: must(loadMigrations(migrationFiles, "migrations")),
		log:   "{table_migrations}",
		// The lock key keeps the name it had when this code lived in
		// package relay, so an older binary migrating at the same time is
		// serialised too.
		lock: "warren.relay.migrate:",
		what: "schema version",
	}
	planeSequence = sequence{
		steps: must(loadMigrations(migrationFiles, "migrations_plane")),
		log:   "{table_warren_migrations}",
		lock:  "warren.plane.migrate:",
		what:  "warren's optional columns, version",
	}
)

func loadMigrations(fsys fs.FS, dir string) ([]migration, error) {
	names, err := fs.Glob(fsys, dir+"/*.sql")
	if err != nil {
		return nil, err
	}
	var out []migration
	for _, name := range names {
		base := strings.TrimSuffix(path.Base(name), ".sql")
		num, label, ok := strings.Cut(base, "_")
		version, err := strconv.Atoi(num)
		if !ok || err != nil || version < 1 {
			return nil, fmt.Errorf("migration %s: name must be NNN_label.sql", name)
		}
		body, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, err
		}
		index, err := indexOf(string(body))
		if err != nil {
			return nil, fmt.Errorf("migration %s: %w", name, err)
		}
		out = append(out, migration{version: version, name: label, sql: string(body), index: index})
	}
	slices.SortFunc(out, func(a, b migration) int { return a.version - b.version })
	for i, m := range out {
		if m.version != i+1 {
			return nil, fmt.Errorf("migration versions must run 1, 2, 3, … without gaps; found %d at position %d", m.version, i+1)
		}
	}
	return out, nil
}

// SchemaVersion returns the outbox schema version this package writes
// and expects: the number of its embedded migrations.
func SchemaVersion() int { return len(warrenSequence.steps) }

// PlaneSchemaVersion returns the version of warren's optional columns on
// a SchemaPlane table that this package applies: the number of its
// embedded Plane migrations.
func PlaneSchemaVersion() int { return len(planeSequence.steps) }

func (o *Table) sequence() sequence {
	if o.schema == SchemaPlane {
		return planeSequence
	}
	return warrenSequence
}

// ErrSchema is wrapped by the errors that say the table's schema is not
// the one this package expects: not created yet, older (run Migrate), or
// newer (this binary is older than the database).
var ErrSchema = errors.New("outbox schema mismatch")

// MigrateResult says what [Table.Migrate] did.
type MigrateResult struct {
	Table    string
	From, To int // schema versions before and after; equal when nothing was applied
	// Recreated says the table was missing while its migrations record
	// said it was at From: it was created again, empty, from version 1.
	// On a SchemaPlane table: warren's columns were all missing while its
	// record said From (Plane created its table again), and every step
	// ran again.
	Recreated bool
}

// Migrate creates the outbox table or brings it up to [SchemaVersion]. It
// is safe to call at every start and from several processes at once: an
// advisory lock on the table's name serialises them, and every step runs
// with its version record in one transaction. The versions applied are
// recorded in a table named after the outbox with the suffix
// "_migrations".
//
// On a SchemaPlane table, which Plane's migrations create, Migrate adds
// warren's optional columns and indexes (up to [PlaneSchemaVersion]),
// recorded in a table with the suffix "_warren_migrations"; it refuses a
// table that is missing or is not Plane's outbox. It does so without
// stopping Plane's writes for longer than a moment: see [Options].LockTimeout
// and migratePlane. db must then be a pool or a connection, not a
// transaction, since the indexes are built with CREATE INDEX CONCURRENTLY.
func (o *Table) Migrate(ctx context.Context, db DB) (MigrateResult, error) {
	if o.schema == SchemaPlane {
		return o.migratePlane(ctx, db)
	}
	res := MigrateResult{Table: o.table}
	seq := o.sequence()
	tx, err := db.Begin(ctx)
	if err != nil {
		return res, fmt.Errorf("migrate %s: %w", o.table, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, seq.lock+o.table); err != nil {
		return res, fmt.Errorf("migrate %s: lock: %w", o.table, err)
	}
	if _, err := tx.Exec(ctx, createLogSQL(o.table, seq)); err != nil {
		return res, fmt.Errorf("migrate %s: %w", o.table, err)
	}
	if err := tx.QueryRow(ctx, versionSQL(o.table, seq)).Scan(&res.From); err != nil {
		return res, fmt.Errorf("migrate %s: read version: %w", o.table, err)
	}
	res.To = res.From
	if latest := len(seq.steps); res.From > latest {
		return res, fmt.Errorf("migrate %s: %w: the table is at %s %d, newer than this build of warren knows (%d)", o.table, ErrSchema, seq.what, res.From, latest)
	}
	from, err := o.checkApplied(ctx, tx, seq, res.From)
	if err != nil {
		return res, fmt.Errorf("migrate %s: %w", o.table, err)
	}
	res.Recreated = from < res.From
	res.To = from
	record := recordSQL(o.table, seq)
	for _, m := range seq.steps[from:] {
		if _, err := tx.Exec(ctx, render(o.table, m.sql)); err != nil {
			return res, fmt.Errorf("migrate %s: step %d (%s): %w", o.table, m.version, m.name, err)
		}
		if _, err := tx.Exec(ctx, record, m.version, m.name); err != nil {
			return res, fmt.Errorf("migrate %s: record step %d: %w", o.table, m.version, err)
		}
		res.To = m.version
	}
	if err := tx.Commit(ctx); err != nil {
		return res, fmt.Errorf("migrate %s: commit: %w", o.table, err)
	}
	return res, nil
}

// checkApplied checks that what the first version steps of seq made is
// there, and returns the version to migrate from. A record says only what
// ran once; the table, or an index or constraint of it, may have been
// dropped since, and a migrate that trusted the record would report "up
// to date" for a table producers cannot write to.
//
// A missing table is created again: the record is cleared and every step
// runs, in this transaction. Its rows are gone whatever migrate does, and
// producers' transactions fail (Publish cannot insert) until it exists,
// so the table migrate exists to provide is what the operator needs; the
// caller reports the re-creation (MigrateResult.Recreated) so that the
// loss is seen. A table that exists without an index or constraint its
// steps made is an error naming them: the table holds rows, the steps
// that made them cannot run again on it, and which fix fits (re-create
// the index, or find out who dropped a constraint and why) is the
// operator's call.
func (o *Table) checkApplied(ctx context.Context, tx pgx.Tx, seq sequence, version int) (int, error) {
	if version == 0 {
		return o.recordLost(ctx, tx, seq)
	}
	exists, err := o.checkMade(ctx, tx, seq, version, false)
	if err != nil || exists {
		return version, err
	}
	// Its indexes keep their names when a table is renamed: creating it
	// again would fail on them, saying only "already exists".
	elsewhere, err := queryStrings(ctx, tx, `SELECT format('%s (on %s)', n, i.indrelid::regclass) FROM unnest($1::text[]) AS n JOIN pg_index AS i ON i.indexrelid = to_regclass(quote_ident(n)) ORDER BY n`, objectNames(o.table, seq.steps[:version]))
	if err != nil {
		return 0, fmt.Errorf("look for the missing table's indexes: %w", err)
	}
	if len(elsewhere) > 0 {
		return 0, fmt.Errorf("%w: the table does not exist, though its migrations record says %s %d, and its indexes are on another table (renamed?): %s; rename that table back, or rename or drop its indexes, and run migrate again",
			ErrSchema, seq.what, version, strings.Join(elsewhere, ", "))
	}
	if _, err := tx.Exec(ctx, render(o.table, `DELETE FROM `+seq.log)); err != nil {
		return 0, fmt.Errorf("clear the record of a missing table: %w", err)
	}
	return 0, nil
}

// recordLost handles a table with an empty migrations record: new, or
// its record dropped. A table that exists and has everything the steps
// make had them all run: they are recorded again, and nothing runs. Any
// other existing table is an error naming the record, not step 1's
// "already exists".
func (o *Table) recordLost(ctx context.Context, tx pgx.Tx, seq sequence) (int, error) {
	exists, err := o.checkMade(ctx, tx, seq, len(seq.steps), false)
	switch {
	case err != nil:
		return 0, fmt.Errorf("the table exists but its migrations record %s is empty (dropped?), and it is not what warren's migrations make: %w", render(o.table, seq.log), err)
	case !exists:
		return 0, nil
	}
	record := recordSQL(o.table, seq)
	for _, m := range seq.steps {
		if _, err := tx.Exec(ctx, record, m.version, m.name); err != nil {
			return 0, fmt.Errorf("record step %d again: %w", m.version, err)
		}
	}
	return len(seq.steps), nil
}

// checkMade is the one check, for Migrate and CheckSchema, that what the
// first version steps of seq made is there: whether the table exists,
// and, when it does, an error wrapping ErrSchema naming what is missing
// or not as the steps made it. A record says only what ran once; the
// table, or a column, index or constraint of it, may have been dropped
// or replaced since.
//
// forRelay (CheckSchema) leaves CHECK constraints out: they guard what
// producers write, and the relay must handle a row written around them
// anyway (dead at once if it cannot be published), so a table missing one
// is no reason to keep a relay from draining it. Migrate, which can make
// them, is strict.
func (o *Table) checkMade(ctx context.Context, db DB, seq sequence, version int, forRelay bool) (bool, error) {
	var exists bool
	if err := db.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, render(o.table, "{table}")).Scan(&exists); err != nil {
		return false, fmt.Errorf("look for the table: %w", err)
	}
	if !exists {
		return false, nil
	}
	if err := o.checkLogged(ctx, db, seq); err != nil {
		return true, err
	}
	var problems []string
	var err error
	if !forRelay { // by name; the comparison by definition below covers the rest
		if problems, err = queryStrings(ctx, db, missingObjectsSQL, render(o.table, "{table}"), objectNames(o.table, seq.steps[:version])); err != nil {
			return true, fmt.Errorf("look for the table's indexes and constraints: %w", err)
		}
	}
	if len(problems) == 0 && seq.log == warrenSequence.log {
		problems, err = o.unlikeSteps(ctx, db, seq.steps[:version])
		var pgErr *pgconn.PgError
		switch {
		case errors.As(err, &pgErr) && (pgErr.Code == "42501" || pgErr.Code == "25006"):
			// A role without the TEMP privilege (hardened databases revoke
			// it from PUBLIC) or a read-only transaction cannot make the
			// scratch table: the table and every object its steps name are
			// there, and the comparison by definition is skipped rather than
			// keeping a relay from starting.
			problems = nil
		case err != nil:
			return true, fmt.Errorf("compare the table with what its migrations make: %w", err)
		}
		if forRelay {
			problems = slices.DeleteFunc(problems, func(p string) bool { return strings.HasPrefix(p, "constraint CHECK ") })
		}
	}
	if len(problems) > 0 {
		return true, fmt.Errorf("%w: what warren's migrations make up to %s %d is missing from the table or was changed (dropped? replaced?): %s; create it again as warren's outbox/migrations define it, or, if the table holds nothing to keep, drop the table and run migrate again",
			ErrSchema, seq.what, version, strings.Join(problems, ", "))
	}
	return true, nil
}

// scratchTable is the temporary table unlikeSteps builds: a session's
// own (TEMP), so concurrent checks never meet, and rolled back at once.
const scratchTable = "warren_outbox_scratch"

// unlikeSteps applies steps to a temporary scratch table, inside a
// savepoint (or transaction) that is rolled back, and returns what the
// scratch has that the table has not: a column of that name, type and
// nullability, a constraint of that definition, an index of that
// definition and uniqueness. Names cannot tell these apart (a unique
// constraint dropped and a plain index given its name), and a list
// written here would drift from the steps; the steps themselves cannot.
// What the operator added beside them is not a difference.
func (o *Table) unlikeSteps(ctx context.Context, db DB, steps []migration) ([]string, error) {
	tx, err := db.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	create := `CREATE TABLE ` + render(scratchTable, "{table}")
	for _, m := range steps {
		sql := render(scratchTable, m.sql)
		sql = strings.Replace(sql, create, `CREATE TEMP TABLE `+render(scratchTable, "{table}"), 1)
		if _, err := tx.Exec(ctx, sql); err != nil {
			return nil, fmt.Errorf("step %d (%s) on a scratch table: %w", m.version, m.name, err)
		}
	}
	return queryStrings(ctx, tx, unlikeSQL, render(o.table, "{table}"), "pg_temp."+render(scratchTable, "{table}"))
}

// unlikeSQL lists what table $2 has that table $1 has not, by definition
// rather than name. A check that was added NOT VALID and validated since
// is the same check.
const unlikeSQL = `WITH defs AS (
  SELECT attrelid AS rel, format('column %s %s%s', quote_ident(attname), format_type(atttypid, atttypmod), CASE WHEN attnotnull THEN ' NOT NULL' END) AS def
    FROM pg_attribute WHERE attrelid IN ($1::regclass, $2::regclass) AND attnum > 0 AND NOT attisdropped
  UNION ALL
  SELECT conrelid, 'constraint ' || regexp_replace(pg_get_constraintdef(oid), ' NOT VALID$', '')
    FROM pg_constraint WHERE conrelid IN ($1::regclass, $2::regclass)
  UNION ALL
  SELECT indrelid, CASE WHEN indisunique THEN 'unique ' ELSE '' END || 'index ' || regexp_replace(pg_get_indexdef(indexrelid), '^.*? USING ', 'USING ')
    FROM pg_index WHERE indrelid IN ($1::regclass, $2::regclass))
SELECT def FROM defs WHERE rel = $2::regclass EXCEPT SELECT def FROM defs WHERE rel = $1::regclass ORDER BY 1`

func queryStrings(ctx context.Context, db DB, sql string, args ...any) ([]string, error) {
	rows, err := db.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// missingObjectsSQL lists the names of $2 that are neither an index nor
// a constraint of table $1.
const missingObjectsSQL = `SELECT n FROM unnest($2::text[]) AS n
WHERE NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conrelid = $1::regclass AND conname = n)
  AND NOT EXISTS (SELECT 1 FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = $1::regclass AND c.relname = n)
ORDER BY n`

// objectNames are the names of the indexes and constraints steps make:
// their {table_suffix} placeholders other than the migrations record's,
// cut as Postgres cuts an identifier, to 63 bytes (the names are ASCII;
// a long table name with a long suffix exceeds it).
func objectNames(table string, steps []migration) []string {
	const maxIdentifier = 63
	var names []string
	for _, m := range steps {
		for _, p := range placeholderRE.FindAllStringSubmatch(m.sql, -1) {
			name := table + p[1]
			name = name[:min(len(name), maxIdentifier)]
			if p[1] != "" && p[1] != "_migrations" && !slices.Contains(names, name) {
				names = append(names, name)
			}
		}
	}
	return names
}

func createLogSQL(table string, seq sequence) string {
	return render(table, `CREATE TABLE IF NOT EXISTS `+seq.log+` (
		version    integer     PRIMARY KEY,
		name       text        NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now())`)
}

func recordSQL(table string, seq sequence) string {
	return render(table, `INSERT INTO `+seq.log+` (version, name) VALUES ($1, $2)`)
}

func versionSQL(table string, seq sequence) string {
	return render(table, `SELECT coalesce(max(version), 0) FROM `+seq.log)
}

// migrationVersion reads how far the table is along seq: 0 when its record
// does not exist.
func (o *Table) migrationVersion(ctx context.Context, db DB, seq sequence) (int, error) {
	var exists bool
	if err := db.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, render(o.table, seq.log)).Scan(&exists); err != nil {
		return 0, fmt.Errorf("outbox %s: read migration record: %w", o.table, err)
	}
	if !exists {
		return 0, nil
	}
	var version int
	if err := db.QueryRow(ctx, versionSQL(o.table, seq)).Scan(&version); err != nil {
		return 0, fmt.Errorf("outbox %s: read migration record: %w", o.table, err)
	}
	return version, nil
}

// CheckSchema returns nil when the table is at [SchemaVersion], and an
// error wrapping [ErrSchema] that says what to do when it is not. On a
// SchemaPlane table it checks Plane's columns ([Table.CheckPlane]); the
// optional migration is not required.
func (o *Table) CheckSchema(ctx context.Context, db DB) error {
	if o.schema == SchemaPlane {
		_, err := o.CheckPlane(ctx, db)
		return err
	}
	var version int
	err := db.QueryRow(ctx, o.sql.schemaVersion).Scan(&version)
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == "42P01": // undefined_table
		return fmt.Errorf("outbox %s: %w: the table does not exist; run `warren outbox migrate` or Table.Migrate", o.table, ErrSchema)
	case err != nil:
		return fmt.Errorf("outbox %s: read schema version: %w", o.table, err)
	case version < SchemaVersion():
		return fmt.Errorf("outbox %s: %w: the table is at version %d, this build needs %d; run `warren outbox migrate` or Table.Migrate", o.table, ErrSchema, version, SchemaVersion())
	case version > SchemaVersion():
		return fmt.Errorf("outbox %s: %w: the table is at version %d, newer than this build of warren knows (%d)", o.table, ErrSchema, version, SchemaVersion())
	}
	// The record says only what ran once: the table may have been dropped
	// or changed since, and a relay started on it would deliver nothing.
	exists, err := o.checkMade(ctx, db, warrenSequence, version, true)
	switch {
	case err != nil:
		return fmt.Errorf("outbox %s: %w", o.table, err)
	case !exists:
		return fmt.Errorf("outbox %s: %w: the table does not exist, though its migrations record says version %d (dropped?); run `warren outbox migrate` or Table.Migrate to create it again", o.table, ErrSchema, version)
	}
	return nil
}

// checkLogged refuses an outbox, a partition of it or seq's migrations
// record that is UNLOGGED or temporary. Postgres empties an unlogged
// table when it recovers from a crash or an immediate shutdown: every
// event not yet published would be lost while the writes it describes
// stay committed, and a lost record keeps every relay from starting until
// the table is migrated again. (CDC cannot stream an unlogged table at
// all, and a published table cannot be made UNLOGGED.)
func (o *Table) checkLogged(ctx context.Context, db DB, seq sequence) error {
	switch err := pgdurable.Check(ctx, db, render(o.table, "{table}"), render(o.table, seq.log)); {
	case errors.Is(err, pgdurable.ErrNotLogged):
		return fmt.Errorf("%w: %w; an outbox must keep every event not yet published", ErrSchema, err)
	case err != nil:
		return err
	}
	return nil
}
