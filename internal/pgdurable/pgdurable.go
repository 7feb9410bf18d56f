package pgdurable

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// ErrNotLogged is what the error of [Check] is ([errors.Is]) when it found
// a table that is not logged, rather than failing to look.
var ErrNotLogged = errors.New("a table is not logged")

type notLogged string

func (e notLogged) Error() string      { return string(e) }
func (notLogged) Is(target error) bool { return target == ErrNotLogged }

// Querier reads the catalog: a pool, a connection or a transaction.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Check returns an error naming every relation among the tables given
// (names as to_regclass reads them, quoted where needed) and their
// partitions at every level that is UNLOGGED or temporary (an error that
// is [ErrNotLogged]), or nil when there is none. A table that does not exist is not checked: whoever
// creates it creates it logged. The error's text says what the relation
// is; the caller says what would be lost.
func Check(ctx context.Context, db Querier, tables ...string) error {
	var found []string
	err := db.QueryRow(ctx, `
SELECT coalesce(pg_catalog.array_agg(c.oid::pg_catalog.regclass::text
		|| CASE c.relpersistence WHEN 'u' THEN ' is UNLOGGED' ELSE ' is a temporary table' END
		ORDER BY c.oid::pg_catalog.regclass::text), '{}')
FROM pg_catalog.pg_class AS c
WHERE c.relpersistence IN ('u', 't') AND c.oid IN (
	SELECT pg_catalog.to_regclass(n.name) FROM pg_catalog.unnest($1::text[]) AS n(name)
	UNION -- a table that is neither partitioned nor a partition has no tree
	SELECT t.relid FROM pg_catalog.unnest($1::text[]) AS n(name),
		LATERAL pg_catalog.pg_partition_tree(pg_catalog.to_regclass(n.name)) AS t)`, tables).Scan(&found)
	if err != nil {
		return fmt.Errorf("read whether %s is logged: %w", strings.Join(tables, ", "), err)
	}
	if len(found) > 0 {
		return notLogged(fmt.Sprintf("%s: PostgreSQL empties an unlogged table when it recovers from a crash or an immediate shutdown, and a temporary one goes with its session; run ALTER TABLE … SET LOGGED", strings.Join(found, ", ")))
	}
	return nil
}
