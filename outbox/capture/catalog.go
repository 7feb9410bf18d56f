package capture

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/warrenmq/warren/outbox"
)

// column is one column of the captured table as the catalog describes it
// at generation time.
type column struct {
	name string
}

// table is what generation reads from the catalog, once.
type table struct {
	schema, name string
	columns      []column // in the table's order
	primaryKey   []string // in the key's order
}

func (t *table) column(name string) (column, bool) {
	for _, c := range t.columns {
		if c.name == name {
			return c, true
		}
	}
	return column{}, false
}

// readTable reads the table's columns and primary key. A relation that
// is not a plain or partitioned table is refused.
func readTable(ctx context.Context, db outbox.DB, name string) (*table, error) {
	var (
		t    table
		oid  uint32
		kind string
	)
	err := db.QueryRow(ctx, `
		SELECT c.oid, n.nspname, c.relname, c.relkind::text
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE c.oid = to_regclass($1)`, name).Scan(&oid, &t.schema, &t.name, &kind)
	if err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, invalidf("table %s does not exist", name)
		}
		return nil, fmt.Errorf("capture %s: read the catalog: %w", name, err)
	}
	if kind != "r" && kind != "p" {
		return nil, invalidf("%s is not a table (pg_class.relkind %q); only tables can be captured", name, kind)
	}
	rows, err := db.Query(ctx, `
		SELECT a.attname
		FROM pg_attribute a
		WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped
		ORDER BY a.attnum`, oid)
	if err != nil {
		return nil, fmt.Errorf("capture %s: read columns: %w", name, err)
	}
	for rows.Next() {
		var c column
		if err := rows.Scan(&c.name); err != nil {
			rows.Close()
			return nil, fmt.Errorf("capture %s: read columns: %w", name, err)
		}
		t.columns = append(t.columns, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("capture %s: read columns: %w", name, err)
	}
	rows, err = db.Query(ctx, `
		SELECT a.attname
		FROM pg_index i
		CROSS JOIN LATERAL unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord)
		JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
		WHERE i.indrelid = $1 AND i.indisprimary
		ORDER BY k.ord`, oid)
	if err != nil {
		return nil, fmt.Errorf("capture %s: read primary key: %w", name, err)
	}
	for rows.Next() {
		var col string
		if err := rows.Scan(&col); err != nil {
			rows.Close()
			return nil, fmt.Errorf("capture %s: read primary key: %w", name, err)
		}
		t.primaryKey = append(t.primaryKey, col)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("capture %s: read primary key: %w", name, err)
	}
	return &t, nil
}

// quote quotes an identifier for SQL.
func quote(name string) string {
	return `"` + strings.ReplaceAll(name, `"`, `""`) + `"`
}

// literal quotes s as a SQL string literal. Names containing a backslash
// are refused before they get here, so the literal means the same whatever
// standard_conforming_strings is.
func literal(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}
