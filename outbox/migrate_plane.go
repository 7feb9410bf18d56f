package outbox

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DefaultLockTimeout is Options.LockTimeout's default.
const DefaultLockTimeout = 5 * time.Second

// ErrLockTimeout is wrapped by the error of a Plane table's [Table.Migrate]
// that gave up waiting for the table's lock.
var ErrLockTimeout = errors.New("could not lock the table in time")

// migratePlane applies the Plane sequence one step at a time on one
// connection, because Plane keeps writing the table meanwhile:
//
//   - a step that changes the table (the ALTER TABLE of the columns) runs
//     in its own short transaction with its version record, under SET
//     LOCAL lock_timeout: its ACCESS EXCLUSIVE lock, while it waits for a
//     long transaction to end, would hold up every read and write queued
//     behind it. It fails instead, having changed nothing, and says so;
//   - a step that builds an index runs CREATE INDEX CONCURRENTLY outside
//     any transaction, which lets Plane's writes go on, and its version is
//     recorded after the build. An index a failed or cancelled build left
//     INVALID is dropped (concurrently) and built again, here and at
//     every later Migrate, since a recorded step's index is checked too.
//
// A session advisory lock serialises migrators: a second one must not see
// a build in progress (not yet valid) and drop it as a failed one.
func (o *Table) migratePlane(ctx context.Context, db DB) (res MigrateResult, err error) {
	res = MigrateResult{Table: o.table}
	seq := planeSequence
	if _, err := o.planeColumns(ctx, db); err != nil {
		return res, fmt.Errorf("migrate: %w", err)
	}
	conn, release, err := dedicatedConn(ctx, db)
	if err != nil {
		return res, fmt.Errorf("migrate %s: %w", o.table, err)
	}
	defer release()
	key := seq.lock + o.table
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock(hashtextextended($1, 0))`, key); err != nil {
		return res, fmt.Errorf("migrate %s: lock: %w", o.table, err)
	}
	defer func() {
		if _, uerr := conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock(hashtextextended($1, 0))`, key); uerr != nil {
			// A session lock must not go back to the pool with the
			// connection: closing it releases the lock.
			conn.Close(context.WithoutCancel(ctx))
		}
	}()
	if _, err := conn.Exec(ctx, createLogSQL(o.table, seq)); err != nil {
		return res, fmt.Errorf("migrate %s: %w", o.table, err)
	}
	if err := conn.QueryRow(ctx, versionSQL(o.table, seq)).Scan(&res.From); err != nil {
		return res, fmt.Errorf("migrate %s: read version: %w", o.table, err)
	}
	res.To = res.From
	if latest := len(seq.steps); res.From > latest {
		return res, fmt.Errorf("migrate %s: %w: the table is at %s %d, newer than this build of warren knows (%d)", o.table, ErrSchema, seq.what, res.From, latest)
	}
	from, err := o.checkPlaneRecord(ctx, conn, res.From)
	if err != nil {
		return res, fmt.Errorf("migrate %s: %w", o.table, err)
	}
	res.Recreated = from != res.From
	for _, m := range seq.steps {
		applied := m.version <= from
		switch {
		case m.index != "":
			if err := o.buildIndex(ctx, conn, m); err != nil {
				return res, fmt.Errorf("migrate %s: step %d (%s): %w", o.table, m.version, m.name, err)
			}
			if !applied {
				if _, err := conn.Exec(ctx, recordSQL(o.table, seq), m.version, m.name); err != nil {
					return res, fmt.Errorf("migrate %s: record step %d: %w", o.table, m.version, err)
				}
			}
		case !applied:
			if err := o.alterStep(ctx, conn, seq, m); err != nil {
				return res, err
			}
		}
		if !applied {
			res.To = m.version
		}
	}
	return res, nil
}

// checkPlaneRecord checks warren's columns against the record, under the
// migration lock, and returns the version to migrate from. A record says
// only what ran once: Plane may have created its table again since (a
// reset, a restore of the table alone), which takes warren's columns and
// indexes with it. With none of the columns there, the record is cleared
// and every step runs again; the steps add what a re-created table lacks.
// With some there and some missing or changed, no step can run on the
// table as it is (ADD COLUMN fails on those present), and the error names
// what is wrong, by the check CheckPlane makes.
func (o *Table) checkPlaneRecord(ctx context.Context, conn *pgx.Conn, version int) (int, error) {
	if version == 0 {
		return 0, nil
	}
	types, err := o.planeColumns(ctx, conn)
	if err != nil {
		return 0, err
	}
	problems := checkColumns(types, planeOptional)
	switch {
	case len(problems) == 0:
		return version, nil
	case len(problems) == len(planeOptional) && !slices.ContainsFunc(planeOptional, func(c planeColumn) bool { _, ok := types[c.name]; return ok }):
		if _, err := conn.Exec(ctx, render(o.table, `DELETE FROM `+planeSequence.log)); err != nil {
			return 0, fmt.Errorf("clear the record of a table without warren's columns: %w", err)
		}
		return 0, nil
	}
	return 0, fmt.Errorf("%w: its record %s says %s %d, but %s; add them back as warren's outbox/migrations_plane define them",
		ErrSchema, render(o.table, planeSequence.log), planeSequence.what, version, strings.Join(problems, "; "))
}

// alterStep runs a step that changes the table in its own transaction,
// with its version record, giving up on the table's lock after
// LockTimeout.
func (o *Table) alterStep(ctx context.Context, conn *pgx.Conn, seq sequence, m migration) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("migrate %s: %w", o.table, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := tx.Exec(ctx, `SELECT set_config('lock_timeout', $1, true)`, fmt.Sprintf("%dms", max(o.lockTimeout.Milliseconds(), 1))); err != nil {
		return fmt.Errorf("migrate %s: %w", o.table, err)
	}
	if _, err := tx.Exec(ctx, render(o.table, m.sql)); err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "55P03" { // lock_not_available
			return fmt.Errorf("migrate %s: step %d (%s): %w within %v: a transaction holds it (pg_stat_activity shows which, as do the pg_locks on the table). Nothing was changed; waiting longer would have held up every read and write of the table behind this ALTER. Run the migration again when that transaction has ended: %w",
				o.table, m.version, m.name, ErrLockTimeout, o.lockTimeout, err)
		}
		return fmt.Errorf("migrate %s: step %d (%s): %w", o.table, m.version, m.name, err)
	}
	if _, err := tx.Exec(ctx, recordSQL(o.table, seq), m.version, m.name); err != nil {
		return fmt.Errorf("migrate %s: record step %d: %w", o.table, m.version, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("migrate %s: commit step %d: %w", o.table, m.version, err)
	}
	return nil
}

// indexValidSQL says whether an index exists (a row) and is valid: a
// concurrent build that failed, or is still running, leaves it invalid.
const indexValidSQL = `SELECT i.indisvalid FROM pg_index AS i WHERE i.indexrelid = to_regclass($1) AND i.indrelid = to_regclass($2)`

// buildIndex builds a step's index concurrently unless a valid one is
// there, dropping an invalid one first.
func (o *Table) buildIndex(ctx context.Context, conn *pgx.Conn, m migration) error {
	name := render(o.table, m.index)
	var valid bool
	err := conn.QueryRow(ctx, indexValidSQL, name, pgx.Identifier{o.table}.Sanitize()).Scan(&valid)
	switch {
	case err == nil && valid:
		return nil
	case err == nil:
		// Left by a build that failed or was cancelled: Postgres keeps
		// maintaining it on every write but never uses it.
		if _, err := conn.Exec(ctx, `DROP INDEX CONCURRENTLY IF EXISTS `+name); err != nil {
			return fmt.Errorf("drop the invalid index %s a failed build left: %w", name, err)
		}
	case !errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("look up index %s: %w", name, err)
	}
	if _, err := conn.Exec(ctx, render(o.table, m.sql)); err != nil {
		return fmt.Errorf("build index %s concurrently (run the migration again: it drops what a failed build leaves and builds it anew): %w", name, err)
	}
	return nil
}

// planeIndexProblems lists the indexes of the Plane sequence's steps up
// to version that are missing or invalid.
func (o *Table) planeIndexProblems(ctx context.Context, db DB, version int) ([]string, error) {
	var problems []string
	for _, m := range planeSequence.steps[:version] {
		if m.index == "" {
			continue
		}
		name := render(o.table, m.index)
		var valid bool
		err := db.QueryRow(ctx, indexValidSQL, name, pgx.Identifier{o.table}.Sanitize()).Scan(&valid)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			problems = append(problems, fmt.Sprintf("index %s is missing", name))
		case err != nil:
			return nil, fmt.Errorf("outbox %s: look up index %s: %w", o.table, name, err)
		case !valid:
			problems = append(problems, fmt.Sprintf("index %s is invalid (a concurrent build or reindex failed)", name))
		}
	}
	return problems, nil
}

// dedicatedConn returns one connection of db for the whole migration: the
// session advisory lock and CREATE INDEX CONCURRENTLY need a session, and
// the latter no transaction around it.
func dedicatedConn(ctx context.Context, db DB) (*pgx.Conn, func(), error) {
	switch d := db.(type) {
	case *pgxpool.Pool:
		c, err := d.Acquire(ctx)
		if err != nil {
			return nil, nil, err
		}
		return c.Conn(), c.Release, nil
	case *pgx.Conn:
		return d, func() {}, nil
	}
	return nil, nil, fmt.Errorf("warren's migration of Plane's table needs a *pgxpool.Pool or a *pgx.Conn, not %T: it builds its indexes with CREATE INDEX CONCURRENTLY, which cannot run inside a transaction", db)
}
