package capture

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/warrenmq/warren/internal/pgdurable"
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
	return apply(ctx, db, spec.Table, spec.LockTimeout, false, func(tx pgx.Tx) (Migration, error) {
		if err := lockSource(ctx, tx, spec.Table); err != nil {
			return Migration{}, err
		}
		m, err := Generate(ctx, tx, spec)
		if err != nil {
			return Migration{}, err
		}
		if err := ownFunction(ctx, tx, m.installs.function, m.installs.source); err != nil {
			return Migration{}, err
		}
		// Under Record the errors table is the only record of a change
		// whose event was never written: it must outlive a crash, as the
		// outbox must (Generate checks the outbox's schema). A table the
		// install is about to create is created logged.
		if m.installs.errors != "" {
			switch err := pgdurable.Check(ctx, tx, m.installs.errors); {
			case errors.Is(err, pgdurable.ErrNotLogged):
				return Migration{}, invalidf("capture %s: %v", m.Name, err)
			case err != nil:
				return Migration{}, fmt.Errorf("capture %s: %w", m.Name, err)
			}
		}
		var description *string
		if err := tx.QueryRow(ctx, `SELECT pg_catalog.obj_description(to_regprocedure($1), 'pg_proc')`, m.installs.function).Scan(&description); err != nil {
			return Migration{}, fmt.Errorf("capture %s: read the installed capture: %w", m.Name, err)
		}
		if description != nil && !spec.MoveOutbox {
			if was := descriptionOutbox(*description, m.Name); was != "" && was != m.installs.outbox {
				return Migration{}, invalidf("%s is captured to the outbox %s; installing it with the outbox %s would move its events there, and %s's relay would stop seeing them: set MoveOutbox (--move-outbox) to do so",
					m.Name, was, m.installs.outbox, was)
			}
		}
		return m, nil
	})
}

// Uninstall drops the table's capture triggers and function and records
// that as the table's next capture version. Installing again later
// records another. A table that never had one is reported with
// Applied false.
func Uninstall(ctx context.Context, db outbox.DB, table string) (Result, error) {
	return apply(ctx, db, table, 0, true, func(tx pgx.Tx) (Migration, error) {
		if err := lockSource(ctx, tx, table); err != nil {
			return Migration{}, err
		}
		src, _, err := locate(ctx, tx, table)
		if err != nil {
			return Migration{}, err
		}
		name := src.schema + "." + src.name
		function := quote(src.schema) + "." + quote(src.name+functionSuffix)
		if err := ownFunction(ctx, tx, function+"()", quote(src.schema)+"."+quote(src.name)); err != nil {
			return Migration{}, err
		}
		// CASCADE: the function's triggers, on the table and on each of
		// its partitions, whatever version installed them; ownFunction
		// refused a function that other tables' triggers call.
		sql := "-- warren outbox capture: uninstalled.\n" +
			fmt.Sprintf("DROP FUNCTION IF EXISTS %s() CASCADE;\n", function)
		sum := sha256.Sum256([]byte(sql))
		return Migration{Name: name, SQL: sql, Checksum: hex.EncodeToString(sum[:])}, nil
	})
}

// apply runs generate's migration in one transaction and records it,
// unless the table's latest record has its checksum, or onlyOver is set
// and the table has no record.
func apply(ctx context.Context, db outbox.DB, table string, lockTimeout time.Duration, onlyOver bool,
	generate func(pgx.Tx) (Migration, error)) (Result, error) {
	tx, err := db.Begin(ctx)
	if err != nil {
		return Result{}, fmt.Errorf("capture %s: %w", table, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	// Every lock the install waits for (the advisory lock, the table's)
	// is given up after lockTimeout: a LOCK TABLE queued behind a long
	// transaction makes every other writer of the table queue behind it.
	timeout := cmp.Or(lockTimeout, outbox.DefaultLockTimeout).Milliseconds()
	if _, err := tx.Exec(ctx, `SELECT pg_catalog.set_config('lock_timeout', $1, true)`, strconv.FormatInt(max(timeout, 1), 10)); err != nil {
		return Result{}, fmt.Errorf("capture %s: set lock_timeout: %w", table, err)
	}
	// One lock for every capture: installs are rare, and it also covers
	// creating the migrations table, which two first installs would race on.
	if _, err := tx.Exec(ctx, `SELECT pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtextextended('warren.capture', 0))`); err != nil {
		return Result{}, fmt.Errorf("capture %s: lock: %w", table, err)
	}
	// The migrations table is named with its schema (the first on the
	// installer's search_path, where earlier versions created it), and
	// refused unless the installer owns it: its triggers would run as
	// the installer.
	var schema *string
	if err := tx.QueryRow(ctx, `SELECT pg_catalog.current_schema()`).Scan(&schema); err != nil {
		return Result{}, fmt.Errorf("capture %s: read the current schema: %w", table, err)
	}
	if schema == nil {
		return Result{}, fmt.Errorf("capture %s: no schema on the search_path exists to hold %s", table, MigrationsTable)
	}
	migrations := quote(*schema) + "." + quote(MigrationsTable)
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+migrations+` (
		name       text        NOT NULL,
		version    integer     NOT NULL,
		checksum   text        NOT NULL,
		sql        text        NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now(),
		PRIMARY KEY (name, version))`); err != nil {
		return Result{}, fmt.Errorf("capture %s: create %s: %w", table, MigrationsTable, err)
	}
	if err := ownTable(ctx, tx, migrations); err != nil {
		return Result{}, fmt.Errorf("capture %s: %w", table, err)
	}
	m, err := generate(tx)
	if err != nil {
		return Result{}, err
	}
	if m.Name == *schema+"."+MigrationsTable {
		return Result{}, invalidf("%s is where captures are recorded; capturing it would record each install's events in the outbox", m.Name)
	}
	res := Result{Name: m.Name, Checksum: m.Checksum}
	var last string
	err = tx.QueryRow(ctx, `SELECT version, checksum FROM `+migrations+` WHERE name = $1 ORDER BY version DESC LIMIT 1`,
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
	if _, err := tx.Exec(ctx, `INSERT INTO `+migrations+` (name, version, checksum, sql) VALUES ($1, $2, $3, $4)`,
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
	// In a savepoint, so that after a lock timeout the transaction can
	// still say which sessions hold the table.
	if _, err := tx.Exec(ctx, "SAVEPOINT warren_capture_lock"); err != nil {
		return fmt.Errorf("capture %s: %w", table, err)
	}
	_, err := tx.Exec(ctx, "LOCK TABLE "+name+" IN SHARE ROW EXCLUSIVE MODE")
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == "55P03": // lock_not_available
		return fmt.Errorf("capture %s: the table's lock was not granted within lock_timeout; sessions holding it (pid: backend_type, state, query start): %s: %w",
			table, holders(ctx, tx, name), err)
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
// it is: the function, with the generated body and settings, and its
// triggers on the table and on each of its partitions, calling it at the
// generated level and enabled ALWAYS. A rebuilt table loses its
// triggers; DROP TRIGGER, ALTER TABLE … DISABLE TRIGGER or ENABLE TRIGGER
// (which makes a trigger skip replica sessions) and CREATE OR REPLACE
// FUNCTION by hand change them without a record here.
func (o *objects) missing(ctx context.Context, tx pgx.Tx) (string, error) {
	var (
		body, config *string
		problems     []string
	)
	err := tx.QueryRow(ctx, `SELECT prosrc, array_to_string(proconfig, E'\n') FROM pg_proc WHERE oid = to_regprocedure($1)`,
		o.function).Scan(&body, &config)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return "", err
	}
	switch {
	case body == nil:
		problems = append(problems, "function "+o.function+" is missing")
	case *body != o.body || config == nil || *config != functionConfig:
		problems = append(problems, "function "+o.function+" is not the generated one")
	}
	// Each partition has the row-level triggers' clones and a TRUNCATE
	// trigger of its own.
	var onPartitions []trigger
	for _, t := range o.triggers {
		if t.row || t.event == "TRUNCATE" {
			onPartitions = append(onPartitions, t)
		}
	}
	for i, rel := range append([]string{o.source}, o.partitions...) {
		want := o.triggers
		if i > 0 {
			want = onPartitions
		}
		found, err := o.check(ctx, tx, rel, want)
		if err != nil {
			return "", err
		}
		if i > 0 {
			for j := range found {
				found[j] = "on partition " + rel + ", " + found[j]
			}
		}
		problems = append(problems, found...)
	}
	return strings.Join(problems, "; "), nil
}

// check says what is wrong with rel's capture triggers.
func (o *objects) check(ctx context.Context, tx pgx.Tx, rel string, want []trigger) ([]string, error) {
	// tgenabled: A fires in every session; O only in origin and local
	// ones, so not under session_replication_role = replica; R only
	// there; D never.
	// What the trigger does is compared, not only its name: a trigger
	// made again by hand under the name with a WHEN clause, a column list
	// (UPDATE OF), another timing or event, or other transition tables
	// would write fewer events or none.
	rows, _ := tx.Query(ctx, `
		SELECT tgname, tgenabled::text, tgfoid = to_regprocedure($2), tgtype::int,
			coalesce(pg_catalog.pg_get_expr(tgqual, tgrelid), ''), pg_catalog.cardinality(tgattr::int2[]) = 0 AND tgnargs = 0 AND tgconstraint = 0,
			coalesce(tgoldtable::text, ''), coalesce(tgnewtable::text, '')
		FROM pg_catalog.pg_trigger
		WHERE tgrelid = to_regclass($1) AND NOT tgisinternal`, rel, o.function)
	type found struct {
		enabled, when, oldTable, newTable string
		tgtype                            int
		ours, plain                       bool
	}
	var (
		name string
		f    found
		got  = map[string]found{}
	)
	if _, err := pgx.ForEachRow(rows, []any{&name, &f.enabled, &f.ours, &f.tgtype, &f.when, &f.plain, &f.oldTable, &f.newTable},
		func() error { got[name] = f; return nil }); err != nil {
		return nil, err
	}
	generated := func(t trigger, f found) bool {
		oldTable, newTable := t.transition()
		when := ""
		if t.guard {
			when = "false"
		}
		return f.ours && f.plain && f.tgtype == t.tgtype() && f.when == when && f.oldTable == oldTable && f.newTable == newTable
	}
	var problems []string
	for _, t := range want {
		f, ok := got[t.name]
		switch {
		case !ok:
			problems = append(problems, "trigger "+t.name+" is missing")
		case !generated(t, f):
			problems = append(problems, "trigger "+t.name+" is not the generated one")
		case t.replicaOnly && f.enabled != "R":
			problems = append(problems, "trigger "+t.name+" does not fire under session_replication_role = replica only")
		case t.replicaOnly:
		case f.enabled == "D" || f.enabled == "R":
			problems = append(problems, "trigger "+t.name+" is disabled")
		case f.enabled != "A":
			problems = append(problems, "trigger "+t.name+" does not fire under session_replication_role = replica")
		}
	}
	return problems, nil
}

// holders lists the sessions that hold a lock on rel, after a lock
// timeout in the savepoint warren_capture_lock.
func holders(ctx context.Context, tx pgx.Tx, rel string) string {
	var list string
	if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT warren_capture_lock"); err != nil {
		return "unknown (" + err.Error() + ")"
	}
	err := tx.QueryRow(ctx, `
		SELECT coalesce(pg_catalog.string_agg(DISTINCT a.pid::text || ': ' || a.backend_type || ', ' || coalesce(a.state, '') || ', ' ||
			coalesce(a.query_start::text, ''), '; '), 'none left')
		FROM pg_catalog.pg_locks l JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid
		WHERE l.relation = to_regclass($1) AND l.granted AND l.pid <> pg_catalog.pg_backend_pid()`, rel).Scan(&list)
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	return list
}

// ErrNotOwned is wrapped by the errors that refuse to reuse an object
// Install would otherwise take over: the trigger function, the outbox,
// the capture errors table or the migrations table, owned by another
// role than the installing one (current_user), or a table with triggers
// or rules of its own. Such an object runs its owner's code as the
// installer or as every writer of the captured table.
var ErrNotOwned = errors.New("capture: object not owned by the installing role")

// ownTable refuses the table rel (quoted, qualified) unless it is absent,
// or a plain table owned by current_user with no triggers or rules.
func ownTable(ctx context.Context, db outbox.DB, rel string) error {
	var (
		owner, kind    string
		mine, hasOther bool
	)
	err := db.QueryRow(ctx, `
		SELECT pg_catalog.pg_get_userbyid(c.relowner), c.relowner = current_user::regrole, c.relkind::text,
			c.relhasrules OR EXISTS (SELECT FROM pg_catalog.pg_trigger t WHERE t.tgrelid = c.oid AND NOT t.tgisinternal)
		FROM pg_catalog.pg_class c WHERE c.oid = to_regclass($1)`, rel).Scan(&owner, &mine, &kind, &hasOther)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil
	case err != nil:
		return fmt.Errorf("check %s: %w", rel, err)
	case kind != "r" || !mine:
		return fmt.Errorf("%w: %s (pg_class.relkind %q) is owned by %s, not by the installing role; install as its owner, or ALTER TABLE … OWNER TO the installing role after checking it",
			ErrNotOwned, rel, kind, owner)
	case hasOther:
		return fmt.Errorf("%w: %s has triggers or rules, which would run as the installer or as the captured table's writers; drop them",
			ErrNotOwned, rel)
	}
	return nil
}

// ownFunction refuses the capture function (a quoted signature) unless it
// is absent, or owned by current_user and called by no trigger outside
// source's partition tree but TRUNCATE ones. CREATE OR REPLACE would
// keep a planted function's owner, who could then change what every
// writer runs; and the function is named after the table's name, so a
// captured table renamed away keeps calling the function a new table of
// the old name would replace, or whose Uninstall would drop with the
// renamed table's triggers. A TRUNCATE trigger left on a detached
// partition only refuses TRUNCATE: it does not count.
func ownFunction(ctx context.Context, db outbox.DB, function, source string) error {
	var (
		owner  string
		mine   bool
		others []string
	)
	err := db.QueryRow(ctx, `
		SELECT pg_catalog.pg_get_userbyid(p.proowner), p.proowner = current_user::regrole,
			ARRAY(SELECT DISTINCT t.tgrelid::regclass::text FROM pg_catalog.pg_trigger t
				WHERE t.tgfoid = p.oid AND t.tgtype::int & 32 = 0
					AND t.tgrelid <> $2::regclass AND t.tgrelid NOT IN (SELECT relid FROM pg_catalog.pg_partition_tree($2::regclass))
				ORDER BY 1)
		FROM pg_catalog.pg_proc p WHERE p.oid = to_regprocedure($1)`, function, source).Scan(&owner, &mine, &others)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil
	case err != nil:
		return fmt.Errorf("capture %s: check %s: %w", source, function, err)
	case !mine:
		return fmt.Errorf("%w: function %s is owned by %s, not by the installing role; drop it (or install as its owner) after checking what it is",
			ErrNotOwned, function, owner)
	case len(others) > 0:
		return fmt.Errorf("%w: function %s is the capture of %s too (a captured table renamed?); install their capture again under their names, or uninstall it, first",
			ErrInvalidSpec, function, strings.Join(others, ", "))
	}
	return nil
}
