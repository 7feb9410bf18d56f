package capture

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/warrenmq/warren/outbox"
)

// MigrationsTable records every capture migration applied: the captured
// table's name, a version counting up from 1 per table, the SQL and its
// checksum.
const MigrationsTable = "warren_capture_migrations"

// Result says what [Install] or [Uninstall] did.
type Result struct {
	Name     string // the captured table, schema-qualified
	Version  int    // the table's capture version now in place
	Checksum string // of that version's SQL
	Applied  bool   // false: the recorded version already had this SQL, nothing was done
}

// Install generates the capture for spec and applies it, unless the
// table's latest recorded capture migration has the same SQL. The
// generation, the SQL and its record run in one transaction, under an
// advisory lock that serialises concurrent installs; so re-running with
// an unchanged spec and table is a no-op, and a changed spec, or a column
// added to a table whose every column is tracked, is recorded as the next
// version and replaces the trigger function.
//
// Run it again whenever the captured table's columns change: the trigger
// names its columns, so one dropped or renamed makes every write to the
// table fail (Fail) or be recorded as a capture error (Record) until it
// is.
func Install(ctx context.Context, db outbox.DB, spec Spec) (Result, error) {
	return apply(ctx, db, spec.Table, false, func(tx pgx.Tx) (Migration, error) { return Generate(ctx, tx, spec) })
}

// Uninstall drops the table's capture triggers and function and records
// that as the table's next capture version. Installing again later
// records another. A table that never had one is reported with
// Applied false.
func Uninstall(ctx context.Context, db outbox.DB, table string) (Result, error) {
	return apply(ctx, db, table, true, func(tx pgx.Tx) (Migration, error) {
		spec, err := Spec{Table: table}.withDefaults()
		if err != nil {
			return Migration{}, err
		}
		src, err := readTable(ctx, tx, spec.Table)
		if err != nil {
			return Migration{}, err
		}
		name := src.schema + "." + src.name
		source := quote(src.schema) + "." + quote(src.name)
		sql := fmt.Sprintf("-- warren outbox capture: %s uninstalled.\n", name)
		for _, trigger := range []string{triggerInsert, triggerUpdate, triggerDelete} {
			sql += fmt.Sprintf("DROP TRIGGER IF EXISTS %s ON %s;\n", trigger, source)
		}
		sql += fmt.Sprintf("DROP FUNCTION IF EXISTS %s.%s();\n", quote(src.schema), quote(src.name+functionSuffix))
		sum := sha256.Sum256([]byte(sql))
		return Migration{Name: name, SQL: sql, Checksum: hex.EncodeToString(sum[:])}, nil
	})
}

// apply runs generate's migration in one transaction and records it,
// unless the table's latest record has its checksum, or onlyOver is set
// and the table has no record.
func apply(ctx context.Context, db outbox.DB, table string, onlyOver bool, generate func(pgx.Tx) (Migration, error)) (Result, error) {
	tx, err := db.Begin(ctx)
	if err != nil {
		return Result{}, fmt.Errorf("capture %s: %w", table, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	// One lock for every capture: installs are rare, and it also covers
	// creating the migrations table, which two first installs would race on.
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('warren.capture', 0))`); err != nil {
		return Result{}, fmt.Errorf("capture %s: lock: %w", table, err)
	}
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+quote(MigrationsTable)+` (
		name       text        NOT NULL,
		version    integer     NOT NULL,
		checksum   text        NOT NULL,
		sql        text        NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now(),
		PRIMARY KEY (name, version))`); err != nil {
		return Result{}, fmt.Errorf("capture %s: create %s: %w", table, MigrationsTable, err)
	}
	m, err := generate(tx)
	if err != nil {
		return Result{}, err
	}
	res := Result{Name: m.Name, Checksum: m.Checksum}
	var last string
	err = tx.QueryRow(ctx, `SELECT version, checksum FROM `+quote(MigrationsTable)+` WHERE name = $1 ORDER BY version DESC LIMIT 1`,
		m.Name).Scan(&res.Version, &last)
	switch {
	case errors.Is(err, pgx.ErrNoRows) && onlyOver:
		return res, tx.Commit(ctx)
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return Result{}, fmt.Errorf("capture %s: read %s: %w", m.Name, MigrationsTable, err)
	case last == m.Checksum:
		return res, tx.Commit(ctx)
	}
	if _, err := tx.Exec(ctx, m.SQL); err != nil {
		return Result{}, fmt.Errorf("capture %s: apply version %d: %w", m.Name, res.Version+1, err)
	}
	res.Version++
	if _, err := tx.Exec(ctx, `INSERT INTO `+quote(MigrationsTable)+` (name, version, checksum, sql) VALUES ($1, $2, $3, $4)`,
		m.Name, res.Version, m.Checksum, m.SQL); err != nil {
		return Result{}, fmt.Errorf("capture %s: record version %d: %w", m.Name, res.Version, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return Result{}, fmt.Errorf("capture %s: commit version %d: %w", m.Name, res.Version, err)
	}
	res.Applied = true
	return res, nil
}
