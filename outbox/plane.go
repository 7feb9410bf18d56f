package outbox

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/warrenmq/warren/internal/outboxsql"
)

// planeStatements are the operator's queries on a SchemaPlane table, in
// one of two variants: without warren's optional columns, or with them.
type planeStatements struct {
	columns string // the select list that yields outboxsql.Columns
	stats   string
	dead    string // with the migration only
	redrive string // with the migration only
}

// planeColumnsSQL reads a Plane row as outboxsql.Columns, so that the row
// scanner, the relay's encoder and the command's printing work on it
// unchanged.
// Identifiers are cast to text (Plane's are uuid), timestamps to
// timestamptz (Django makes timestamp or timestamptz, by USE_TZ). A row is
// delivered once processed_at is set; available_at is the end of its
// claim's lease, or its creation while unclaimed; claims carries the
// claim's fencing token. Plane has no version, extra, claimed_by or trace
// columns.
const planeColumnsSQL = `id, event_id::text, event_type::text, coalesce(entity_type::text, ''),
	coalesce(entity_id::text, ''), coalesce(workspace_id::text, ''), project_id::text, initiator_id::text,
	coalesce(initiator_type::text, 'USER'), payload::jsonb, NULL::text, NULL::jsonb,
	created_at::timestamptz, created_at::timestamptz,
	CASE WHEN processed_at IS NOT NULL THEN 'delivered' WHEN {is_dead} THEN 'dead' ELSE 'pending' END,
	coalesce(claimed_at::timestamptz + {lease}, created_at::timestamptz),
	{attempts}, {token}, NULL::text, {last_error},
	coalesce(processed_at::timestamptz, {dead_at}), NULL::text, NULL::text`

// The counts are split so that each can run on a partial index: Plane's
// (unclaimed and unprocessed; processed) for the large sets, warren's
// lapsed-claim index (with the migration) for the claimed ones. Without
// the migration the claimed-row counts scan the table.
const planeStatsSQL = `
SELECT
	(SELECT count(*) FROM {table} WHERE claimed_at IS NULL AND processed_at IS NULL)
		+ (SELECT count(*) FROM {table} WHERE claimed_at IS NOT NULL AND processed_at IS NULL{live}),
	(SELECT count(*) FROM {table} WHERE processed_at IS NULL AND claimed_at >= now() - {lease}{live}),
	(SELECT count(*) FROM {table} WHERE processed_at IS NULL AND claimed_at < now() - {lease}{live}),
	({dead_count}),
	(SELECT count(*) FROM {table} WHERE processed_at IS NOT NULL),
	(SELECT coalesce(extract(epoch FROM now() - least(
		(SELECT created_at::timestamptz FROM {table} WHERE claimed_at IS NULL AND processed_at IS NULL ORDER BY id LIMIT 1),
		(SELECT min(created_at::timestamptz) FROM {table} WHERE claimed_at IS NOT NULL AND processed_at IS NULL{live}))), 0)::float8)`

// planeDeadFilter is deadFilter for a Plane table, whose identifiers may
// be uuid: they are compared as text.
const planeDeadFilter = `warren_dead_at IS NOT NULL AND processed_at IS NULL
	AND ($1::text = '' OR starts_with(event_type::text, $1::text))
	AND ($2::text = '' OR entity_id::text = $2::text)
	AND (cardinality($3::text[]) = 0 OR event_id::text = ANY($3::text[]))
	AND (cardinality($5::bigint[]) = 0 OR id = ANY($5::bigint[]))`

const planeDeadSQL = `SELECT {columns} FROM {table} WHERE ` + planeDeadFilter + ` ORDER BY id LIMIT $4`

// A redriven row is unclaimed again, so the relay's claim (and, during a
// cut-over, Plane's poller) takes it at once.
const planeRedriveSQL = `
WITH redriven AS (
	UPDATE {table} SET warren_dead_at = NULL, warren_attempts = 0, claimed_at = NULL
	WHERE id IN (SELECT id FROM {table} WHERE ` + planeDeadFilter + ` ORDER BY id LIMIT $4 FOR UPDATE)
	RETURNING 1
)
SELECT count(*) FROM (SELECT pg_notify($6, '') FROM redriven) AS notified`

// PlaneValues are the placeholders of the SQL that reads and writes a
// SchemaPlane table, for the variant without ("live" rows are all
// unprocessed ones) or with warren's optional columns.
func planeValues(lease time.Duration, migrated bool) map[string]string {
	v := map[string]string{
		"lease":      intervalSQL(lease),
		"token":      outboxsql.PlaneClaimToken("claimed_at"),
		"live":       "",
		"is_dead":    "false",
		"attempts":   "0",
		"last_error": "NULL::text",
		"dead_at":    "NULL::timestamptz",
		"dead_count": "SELECT 0::bigint",
	}
	if migrated {
		v["live"] = " AND warren_dead_at IS NULL"
		v["is_dead"] = "warren_dead_at IS NOT NULL"
		v["attempts"] = "warren_attempts"
		v["last_error"] = "warren_last_error"
		v["dead_at"] = "warren_dead_at"
		v["dead_count"] = "SELECT count(*) FROM {table} WHERE warren_dead_at IS NOT NULL AND processed_at IS NULL"
	}
	return v
}

func renderPlaneStatements(table string, lease time.Duration, migrated bool) planeStatements {
	v := planeValues(lease, migrated)
	v["columns"] = replacePlaceholders(planeColumnsSQL, v)
	r := func(q string) string { return render(table, replacePlaceholders(q, v)) }
	s := planeStatements{columns: v["columns"], stats: r(planeStatsSQL)}
	if migrated {
		s.dead, s.redrive = r(planeDeadSQL), r(planeRedriveSQL)
	}
	return s
}

// rowColumns returns the select list that reads outboxsql.Columns from
// this table: Columns itself for SchemaWarren; for SchemaPlane,
// expressions over Plane's columns, and over warren's optional ones when
// migrated says the table has them ([PlaneSchema].Migrated). Package relay
// builds its claim on it (lent as outboxsql.RowColumns).
func (o *Table) rowColumns(migrated bool) string {
	if o.schema == SchemaPlane {
		return o.plane[b2i(migrated)].columns
	}
	return outboxsql.Columns
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// ErrPlaneMigrationNeeded is wrapped by the errors of the operations that
// need warren's optional columns on a SchemaPlane table (dead rows and
// redrive) when the table lacks them.
var ErrPlaneMigrationNeeded = errors.New("this needs warren's optional columns on Plane's outbox table; run `warren outbox migrate --schema plane` or Table.Migrate")

// PlaneSchema is what [Table.CheckPlane] found.
type PlaneSchema struct {
	// Migrated says warren's optional columns are there (attempts, last
	// error, dead rows, the lapsed-claim index).
	Migrated bool
	// TimeZone says the timestamps are timestamptz; false means timestamp
	// without time zone.
	TimeZone bool
}

// planeColumn is a column the relay reads, and the types (as format_type
// prints them, up to a parenthesis) it reads it as.
type planeColumn struct {
	name  string
	types []string
}

var (
	planeIDTypes   = []string{"uuid", "text", "character varying"}
	planeTextTypes = []string{"text", "character varying"}
	planeTimeTypes = []string{"timestamp without time zone", "timestamp with time zone"}
)

// planeRequired are the columns of Plane's outbox model.
var planeRequired = []planeColumn{
	{"id", []string{"bigint", "integer"}},
	{"event_id", planeIDTypes},
	{"event_type", planeTextTypes},
	{"entity_type", planeTextTypes},
	{"entity_id", planeIDTypes},
	{"payload", []string{"jsonb", "json"}},
	{"workspace_id", planeIDTypes},
	{"project_id", planeIDTypes},
	{"initiator_id", planeIDTypes},
	{"initiator_type", planeTextTypes},
	{"created_at", planeTimeTypes},
	{"claimed_at", planeTimeTypes},
	{"processed_at", planeTimeTypes},
}

// planeOptional are the columns warren's migration adds.
var planeOptional = []planeColumn{
	{"warren_attempts", []string{"integer"}},
	{"warren_last_error", []string{"text"}},
	{"warren_dead_at", []string{"timestamp with time zone"}},
}

// The table is looked up as the relay's statements find it: by its name on
// the connection's search_path.
const planeColumnsQuery = `
SELECT a.attname::text, format_type(a.atttypid, a.atttypmod)
FROM pg_attribute AS a
WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped`

// CheckPlane checks that a SchemaPlane table has Plane's columns, in
// types the relay reads, and says whether warren's optional migration is
// applied. A missing table or column is an error wrapping [ErrSchema].
//
// Migrated needs every index of the migration valid as well: with the
// migration recorded, a missing or invalid one (a failed REINDEX
// CONCURRENTLY, a DROP INDEX) is an error that says to run the migration
// again, which rebuilds it.
func (o *Table) CheckPlane(ctx context.Context, db DB) (PlaneSchema, error) {
	var ps PlaneSchema
	types, err := o.planeColumns(ctx, db)
	if err != nil {
		return ps, err
	}
	if err := o.checkLogged(ctx, db, planeSequence); err != nil {
		return ps, fmt.Errorf("outbox %s: %w", o.table, err)
	}
	ps.TimeZone = types["claimed_at"] == "timestamp with time zone"
	version, err := o.migrationVersion(ctx, db, planeSequence)
	if err != nil {
		return ps, err
	}
	switch latest := len(planeSequence.steps); {
	case version > latest:
		return ps, fmt.Errorf("outbox %s: %w: warren's columns are at version %d, newer than this build of warren knows (%d)", o.table, ErrSchema, version, latest)
	case version == latest:
		if problems := checkColumns(types, planeOptional); len(problems) > 0 {
			return ps, fmt.Errorf("outbox %s: %w: warren's migration is recorded but its columns are not right: %s", o.table, ErrSchema, strings.Join(problems, "; "))
		}
		problems, err := o.planeIndexProblems(ctx, db, version)
		if err != nil {
			return ps, err
		}
		if len(problems) > 0 {
			return ps, fmt.Errorf("outbox %s: %w: warren's migration is recorded but %s; run `warren outbox migrate --schema plane` (Table.Migrate) again, which rebuilds it", o.table, ErrSchema, strings.Join(problems, "; "))
		}
		ps.Migrated = true
	}
	return ps, nil
}

// planeColumns checks that the table has Plane's columns, in types the
// relay reads, and returns every column's type.
func (o *Table) planeColumns(ctx context.Context, db DB) (map[string]string, error) {
	if o.schema != SchemaPlane {
		return nil, fmt.Errorf("outbox %s: CheckPlane on a %s table", o.table, o.schema)
	}
	rows, err := db.Query(ctx, planeColumnsQuery, pgx.Identifier{o.table}.Sanitize())
	if err != nil {
		return nil, fmt.Errorf("outbox %s: read columns: %w", o.table, err)
	}
	types := map[string]string{}
	var name, typ string
	if _, err := pgx.ForEachRow(rows, []any{&name, &typ}, func() error { types[name] = typ; return nil }); err != nil {
		return nil, fmt.Errorf("outbox %s: read columns: %w", o.table, err)
	}
	if len(types) == 0 {
		return nil, fmt.Errorf("outbox %s: %w: the table does not exist (Plane's migrations create it; check --table and the search_path)", o.table, ErrSchema)
	}
	if problems := checkColumns(types, planeRequired); len(problems) > 0 {
		return nil, fmt.Errorf("outbox %s: %w: not Plane's outbox table: %s", o.table, ErrSchema, strings.Join(problems, "; "))
	}
	return types, nil
}

func checkColumns(types map[string]string, want []planeColumn) []string {
	var problems []string
	for _, c := range want {
		typ, ok := types[c.name]
		base, _, _ := strings.Cut(typ, "(")
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("no column %s", c.name))
		case !slices.Contains(c.types, base) && !slices.Contains(c.types, stripPrecision(typ)):
			problems = append(problems, fmt.Sprintf("column %s is %s, not one of %s", c.name, typ, strings.Join(c.types, ", ")))
		}
	}
	return problems
}

// stripPrecision turns "timestamp(3) with time zone" into "timestamp with
// time zone".
func stripPrecision(typ string) string {
	before, rest, ok := strings.Cut(typ, "(")
	if !ok {
		return typ
	}
	_, after, ok := strings.Cut(rest, ")")
	if !ok {
		return typ
	}
	return before + after
}

// planeMigrated checks the table and returns the statements of its
// variant.
func (o *Table) planeStatements(ctx context.Context, db DB) (planeStatements, bool, error) {
	ps, err := o.CheckPlane(ctx, db)
	if err != nil {
		return planeStatements{}, false, err
	}
	return o.plane[b2i(ps.Migrated)], ps.Migrated, nil
}
