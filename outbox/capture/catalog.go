package capture

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/warrenmq/warren/internal/pgdurable"
	"github.com/warrenmq/warren/outbox"
)

// column is one column of the captured table as the catalog describes it
// at generation time.
type column struct {
	name    string
	notNull bool
	typ     string // the type's name, without modifiers: "uuid", "boolean"
}

// table is what generation reads from the catalog, once.
type table struct {
	schema, name string
	columns      []column // in the table's order
	primaryKey   []string // in the key's order
	// deferrableKey: the primary key is DEFERRABLE, so two rows of a
	// transaction may share a key between statements.
	deferrableKey bool
	// inHierarchy: the table is partitioned, a partition, or an
	// inheritance child, so rows of it are written by statements that
	// name another table, or the other way round.
	inHierarchy bool
	// partitions are the partitions below a partitioned table, at every
	// level, schema-qualified and quoted.
	partitions []string
}

func (t *table) column(name string) (column, bool) {
	for _, c := range t.columns {
		if c.name == name {
			return c, true
		}
	}
	return column{}, false
}

// locate finds the table name names. A relation that is not a plain or
// partitioned table is refused.
func locate(ctx context.Context, db outbox.DB, name string) (*table, uint32, error) {
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
			return nil, 0, invalidf("table %s does not exist", name)
		}
		return nil, 0, fmt.Errorf("capture %s: read the catalog: %w", name, err)
	}
	if kind != "r" && kind != "p" {
		return nil, 0, invalidf("%s is not a table (pg_class.relkind %q); only tables can be captured", name, kind)
	}
	t.inHierarchy = kind == "p"
	return &t, oid, nil
}

// readTable reads the table's columns, primary key and hierarchy.
func readTable(ctx context.Context, db outbox.DB, name string) (*table, error) {
	t, oid, err := locate(ctx, db, name)
	if err != nil {
		return nil, err
	}
	if err := t.readHierarchy(ctx, db, oid); err != nil {
		return nil, err
	}
	// Postgres empties an UNLOGGED table or partition when it recovers
	// from a crash or an immediate shutdown, with no DELETE and so no
	// .deleted event; a temporary one goes with its session.
	switch err := pgdurable.Check(ctx, db, name); {
	case errors.Is(err, pgdurable.ErrNotLogged):
		return nil, invalidf("%v: its rows would vanish with no .deleted events", err)
	case err != nil:
		return nil, fmt.Errorf("capture %s: %w", name, err)
	}
	if err := t.readColumns(ctx, db, oid); err != nil {
		return nil, err
	}
	rows, err := db.Query(ctx, `
		SELECT a.attname, NOT i.indimmediate
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
		if err := rows.Scan(&col, &t.deferrableKey); err != nil {
			rows.Close()
			return nil, fmt.Errorf("capture %s: read primary key: %w", name, err)
		}
		t.primaryKey = append(t.primaryKey, col)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("capture %s: read primary key: %w", name, err)
	}
	return t, nil
}

// readColumns reads the table's columns, in its order.
func (t *table) readColumns(ctx context.Context, db outbox.DB, oid uint32) error {
	rows, err := db.Query(ctx, `
		SELECT a.attname, a.attnotnull, a.atttypid::regtype::text
		FROM pg_attribute a
		WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped
		ORDER BY a.attnum`, oid)
	if err != nil {
		return fmt.Errorf("capture: read the columns of %s.%s: %w", t.schema, t.name, err)
	}
	var c column
	_, err = pgx.ForEachRow(rows, []any{&c.name, &c.notNull, &c.typ}, func() error {
		t.columns = append(t.columns, c)
		return nil
	})
	if err != nil {
		return fmt.Errorf("capture: read the columns of %s.%s: %w", t.schema, t.name, err)
	}
	return nil
}

// readLinked reads the columns of a table the trigger reads from (an
// enrichment's, a kind's lookup).
func readLinked(ctx context.Context, db outbox.DB, name string) (*table, error) {
	t, oid, err := locate(ctx, db, name)
	if err != nil {
		return nil, err
	}
	if err := t.readColumns(ctx, db, oid); err != nil {
		return nil, err
	}
	return t, nil
}

// readHierarchy reads where the table stands among partitions and
// inheritance. A table with inheritance children is refused: a statement
// naming a child writes rows of the table that no trigger of the table
// sees, and a child added later would get none (row triggers are cloned
// to partitions, never to inheritance children). So is a partitioned
// table with a foreign partition, whose rows are written elsewhere.
func (t *table) readHierarchy(ctx context.Context, db outbox.DB, oid uint32) error {
	name := t.schema + "." + t.name
	partitioned := t.inHierarchy
	var (
		isChild  bool
		children []string
	)
	err := db.QueryRow(ctx, `
		SELECT EXISTS (SELECT FROM pg_inherits WHERE inhrelid = $1),
			ARRAY(SELECT inhrelid::regclass::text FROM pg_inherits WHERE inhparent = $1 ORDER BY 1)`, oid).Scan(&isChild, &children)
	if err != nil {
		return fmt.Errorf("capture %s: read the inheritance: %w", name, err)
	}
	t.inHierarchy = partitioned || isChild
	if !partitioned {
		if len(children) > 0 {
			return invalidf("table %s has inheritance children (%s): writes naming a child would write no event; capture each child instead",
				name, strings.Join(children, ", "))
		}
		return nil
	}
	rows, err := db.Query(ctx, `
		SELECT n.nspname, c.relname, c.relkind::text
		FROM pg_partition_tree($1::oid) AS p
		JOIN pg_class c ON c.oid = p.relid JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE p.relid <> $1::oid
		ORDER BY p.level, n.nspname, c.relname`, oid)
	if err != nil {
		return fmt.Errorf("capture %s: read the partitions: %w", name, err)
	}
	var schema, rel, kind string
	_, err = pgx.ForEachRow(rows, []any{&schema, &rel, &kind}, func() error {
		if kind != "r" && kind != "p" {
			return invalidf("partition %s.%s of %s is not a table (pg_class.relkind %q): its rows are written where no trigger here sees them",
				schema, rel, name, kind)
		}
		t.partitions = append(t.partitions, quote(schema)+"."+quote(rel))
		return nil
	})
	if err != nil && !errors.Is(err, ErrInvalidSpec) {
		return fmt.Errorf("capture %s: read the partitions: %w", name, err)
	}
	return err
}

// quote quotes an identifier for SQL.
func quote(name string) string {
	return `"` + strings.ReplaceAll(name, `"`, `""`) + `"`
}

// literal quotes s as a SQL string literal that means s whatever
// standard_conforming_strings is: with a backslash in it, an escape string
// (E'…') with the backslashes doubled.
func literal(s string) string {
	q := "'" + strings.ReplaceAll(s, "'", "''") + "'"
	if strings.ContainsRune(s, '\\') {
		return "E" + strings.ReplaceAll(q, `\`, `\\`)
	}
	return q
}
