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

	"github.com/jackc/pgx/v5/pgconn"
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
	record := recordSQL(o.table, seq)
	for _, m := range seq.steps[res.From:] {
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
	return nil
}
