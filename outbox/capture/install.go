package capture

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

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
	// Repaired, when set, says why an Install whose SQL was unchanged
	// applied it again as the next version: what the recorded version
	// had created was no longer in place ("trigger warren_capture_update
	// is missing", "… is disabled", …), so the table's changes were
	// writing no events.
	Repaired string
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
//
// An unchanged result is applied again, as the next version with
// [Result.Repaired] saying why, when what it created is no longer in
// place: a trigger dropped (or lost with a rebuilt table) or disabled, or
// the function dropped or edited. Events were not being written then.
func Install(ctx context.Context, db outbox.DB, spec Spec) (Result, error) {
	return apply(ctx, db, spec.Table, false, func(tx pgx.Tx) (Migration, error) {
		if err := lockSource(ctx, tx, spec.Table); err != nil {
			return Migration{}, err
		}
		return Generate(ctx, tx, spec)
	})
}

// Uninstall drops the table's capture triggers and function and records
// that as the table's next capture version. Installing again later
// records another. A table that never had one is reported with
// Applied false.
func Uninstall(ctx context.Context, db outbox.DB, table string) (Result, error) {
	return apply(ctx, db, table, true, func(tx pgx.Tx) (Migration, error) {
		if err := lockSource(ctx, tx, table); err != nil {
			return Migration{}, err
		}
		src, err := readTable(ctx, tx, table)
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
	case last == m.Checksum && m.installs == nil:
		return res, tx.Commit(ctx)
	case last == m.Checksum:
		if res.Repaired, err = m.installs.missing(ctx, tx); err != nil {
			return Result{}, fmt.Errorf("capture %s: check the installed triggers: %w", m.Name, err)
		}
		if res.Repaired == "" {
			return res, tx.Commit(ctx)
		}
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

// lockSource locks the captured table before its catalog is read, in the
// mode CREATE TRIGGER takes anyway (SHARE ROW EXCLUSIVE): no ALTER TABLE
// can commit between the read and the triggers' creation, which would
// leave a trigger naming a column the table no longer has, or missing a
// new one. The table's writes wait until the install commits, as they
// would for CREATE TRIGGER.
func lockSource(ctx context.Context, tx pgx.Tx, table string) error {
	if _, err := (Spec{Table: table}).withDefaults(); err != nil {
		return err // a name that is not a plain [schema.]name is not quoted below
	}
	name := quote(table)
	if schema, rel, ok := strings.Cut(table, "."); ok {
		name = quote(schema) + "." + quote(rel)
	}
	_, err := tx.Exec(ctx, "LOCK TABLE "+name+" IN SHARE ROW EXCLUSIVE MODE")
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && (pgErr.Code == "42P01" || pgErr.Code == "3F000"): // undefined table, schema
		return invalidf("table %s does not exist", table)
	case errors.As(err, &pgErr) && pgErr.Code == "42809": // wrong_object_type: a sequence, an index
		return invalidf("%s is not a table; only tables can be captured", table)
	case err != nil:
		return fmt.Errorf("capture %s: lock the table: %w", table, err)
	}
	return nil
}

// missing says what of the capture is no longer in place, "" when all of
// it is: the function, with the generated body, and the three triggers,
// enabled. A rebuilt table loses its triggers; DROP TRIGGER, ALTER TABLE
// … DISABLE TRIGGER and CREATE OR REPLACE FUNCTION by hand change them
// without a record here.
func (o *objects) missing(ctx context.Context, tx pgx.Tx) (string, error) {
	var (
		body     *string
		problems []string
	)
	if err := tx.QueryRow(ctx, `SELECT prosrc FROM pg_proc WHERE oid = to_regprocedure($1)`, o.function).Scan(&body); err != nil &&
		!errors.Is(err, pgx.ErrNoRows) {
		return "", err
	}
	switch {
	case body == nil:
		problems = append(problems, "function "+o.function+" is missing")
	case *body != o.body:
		problems = append(problems, "function "+o.function+" is not the generated one")
	}
	// tgenabled: O fires in ordinary sessions, A always; D never, and R
	// only under session_replication_role = replica.
	rows, _ := tx.Query(ctx, `
		SELECT tgname, tgenabled IN ('O', 'A')
		FROM pg_trigger
		WHERE tgrelid = to_regclass($1) AND NOT tgisinternal`, o.source)
	var (
		name    string
		on      bool
		enabled = map[string]bool{}
	)
	if _, err := pgx.ForEachRow(rows, []any{&name, &on}, func() error { enabled[name] = on; return nil }); err != nil {
		return "", err
	}
	for _, trigger := range []string{triggerInsert, triggerUpdate, triggerDelete} {
		on, ok := enabled[trigger]
		switch {
		case !ok:
			problems = append(problems, "trigger "+trigger+" is missing")
		case !on:
			problems = append(problems, "trigger "+trigger+" is disabled")
		}
	}
	return strings.Join(problems, "; "), nil
}
