package outbox

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// Stats is a snapshot of an outbox table.
//
// On a SchemaPlane table, Delivered counts processed rows (until Plane's
// cleaner deletes them), InFlight every claim younger than the lease
// (retry delays included: Plane's table cannot tell them apart, so
// Retrying is 0), Lapsed the claims older than it, and Dead is 0 without
// warren's optional columns.
type Stats struct {
	Pending          int64         // rows not yet delivered or dead, in flight and retrying included
	InFlight         int64         // pending rows leased to a relay right now
	Retrying         int64         // pending rows waiting out the delay after a failed attempt
	Lapsed           int64         // pending rows whose claim's lease ended before the claim settled: a relay (or Plane's poller) died or stalled holding them; a relay takes them over
	Dead             int64         // rows that will not be tried again unless redriven
	Delivered        int64         // delivered rows kept by KeepDelivered (processed rows, on a Plane table), until purged
	OldestPendingAge time.Duration // how long the oldest pending row has waited; 0 when none

	// CaptureErrors counts the rows of [Table.CaptureErrorsTable]: changes
	// whose events a capture trigger with the Record policy could not
	// write. 0 when that table does not exist.
	CaptureErrors int64
}

// Stats counts the table's rows by state. It reads every pending row once
// (and, on a SchemaPlane table without warren's optional columns, the
// claimed ones again), so its cost grows with the backlog: about 0.2 s of
// one core at 1M pending rows. It runs on one backend without JIT, so
// that a relay's metrics (every Config.StatsInterval) do not take every
// core from its claims when the backlog is large: in parallel, JIT
// compiled, the same reading took three backends.
func (o *Table) Stats(ctx context.Context, db DB) (Stats, error) {
	tx, err := db.Begin(ctx)
	if err != nil {
		return Stats{}, fmt.Errorf("outbox %s: stats: %w", o.table, err)
	}
	// Read only: rolled back, which also undoes the settings in a
	// caller's transaction (a savepoint there).
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, statsSettingsSQL); err != nil {
		return Stats{}, fmt.Errorf("outbox %s: stats: %w", o.table, err)
	}
	return o.stats(ctx, tx)
}

// statsSettingsSQL keeps Stats on one backend, without JIT, for the
// transaction.
const statsSettingsSQL = `SELECT set_config('jit', 'off', true), set_config('max_parallel_workers_per_gather', '0', true)`

func (o *Table) stats(ctx context.Context, db DB) (Stats, error) {
	var s Stats
	var oldest float64
	query, dest := o.sql.stats, []any{&s.Pending, &s.InFlight, &s.Retrying, &s.Lapsed, &s.Dead, &s.Delivered, &oldest}
	if o.schema == SchemaPlane {
		st, _, err := o.planeStatements(ctx, db)
		if err != nil {
			return Stats{}, err
		}
		query, dest = st.stats, slices.Delete(dest, 2, 3) // no Retrying
	}
	err := db.QueryRow(ctx, query).Scan(dest...)
	if err != nil {
		return Stats{}, fmt.Errorf("outbox %s: stats: %w", o.table, err)
	}
	s.OldestPendingAge = time.Duration(oldest * float64(time.Second))
	if s.CaptureErrors, err = o.captureErrors(ctx, db); err != nil {
		return Stats{}, fmt.Errorf("outbox %s: stats: %w", o.table, err)
	}
	return s, nil
}

// captureErrors counts the capture errors table's rows, if it exists: a
// statement naming a missing table would fail, so its existence is asked
// first.
func (o *Table) captureErrors(ctx context.Context, db DB) (int64, error) {
	if o.schema == SchemaPlane {
		return 0, nil // capture writes into warren's outbox schema only
	}
	var exists bool
	if err := db.QueryRow(ctx, o.sql.captureErrorsExist, pgx.Identifier{o.CaptureErrorsTable()}.Sanitize()).Scan(&exists); err != nil || !exists {
		return 0, err
	}
	var n int64
	err := db.QueryRow(ctx, o.sql.captureErrors).Scan(&n)
	return n, err
}

// Filter selects dead rows for [Table.Dead] and [Table.Redrive]. Its
// conditions are combined with AND; the zero Filter selects every dead row.
type Filter struct {
	EventTypePrefix string   // event_type starts with this
	EntityID        string   // entity_id equals this
	EventIDs        []string // event_id is one of these
	// IDs selects exactly these rows (Row.ID): the ones a listing showed,
	// so that a redrive confirmed after it touches no row that died since.
	IDs   []int64
	Limit int // at most this many rows, oldest first; 0 means no limit
}

func (f Filter) args() []any {
	var limit any // NULL: no limit
	if f.Limit > 0 {
		limit = f.Limit
	}
	ids, rows := f.EventIDs, f.IDs
	if ids == nil {
		ids = []string{}
	}
	if rows == nil {
		rows = []int64{}
	}
	return []any{f.EventTypePrefix, f.EntityID, ids, limit, rows}
}

// Dead lists dead rows matching f, oldest first. A row holding a value
// that Row cannot represent is listed with its DecodeErr set rather than
// failing the listing.
//
// On a SchemaPlane table it needs warren's optional columns, and returns
// an error wrapping [ErrPlaneMigrationNeeded] without them.
func (o *Table) Dead(ctx context.Context, db DB, f Filter) ([]Row, error) {
	query, err := o.deadQuery(ctx, db, func(s planeStatements) string { return s.dead }, o.sql.dead)
	if err != nil {
		return nil, fmt.Errorf("outbox %s: list dead rows: %w", o.table, err)
	}
	rows, err := db.Query(ctx, query, f.args()...)
	if err != nil {
		return nil, fmt.Errorf("outbox %s: list dead rows: %w", o.table, err)
	}
	out, err := collectRows(rows)
	if err != nil {
		return nil, fmt.Errorf("outbox %s: list dead rows: %w", o.table, err)
	}
	return out, nil
}

// CountDead counts the dead rows matching f (its Limit ignored): how many
// [Table.Dead] would list and [Table.Redrive] would change, for a listing
// that says what it left out and a redrive that says what it will do.
func (o *Table) CountDead(ctx context.Context, db DB, f Filter) (int64, error) {
	query, err := o.deadQuery(ctx, db, func(s planeStatements) string { return s.dead }, o.sql.dead)
	if err != nil {
		return 0, fmt.Errorf("outbox %s: count dead rows: %w", o.table, err)
	}
	f.Limit = 0
	var n int64
	if err := db.QueryRow(ctx, `SELECT count(*) FROM (`+query+`) AS dead`, f.args()...).Scan(&n); err != nil {
		return 0, fmt.Errorf("outbox %s: count dead rows: %w", o.table, err)
	}
	return n, nil
}

// DeadIDs lists the ids of the dead rows matching f, oldest first (at
// most f.Limit): what an operator is asked about, for a [Table.Redrive]
// of exactly those rows (Filter.IDs) once confirmed, so that a row that
// dies while the question waits is not redriven unasked.
func (o *Table) DeadIDs(ctx context.Context, db DB, f Filter) ([]int64, error) {
	query, err := o.deadQuery(ctx, db, func(s planeStatements) string { return s.dead }, o.sql.dead)
	if err != nil {
		return nil, fmt.Errorf("outbox %s: list dead rows: %w", o.table, err)
	}
	rows, err := db.Query(ctx, `SELECT id FROM (`+query+`) AS dead ORDER BY id`, f.args()...)
	if err != nil {
		return nil, fmt.Errorf("outbox %s: list dead rows: %w", o.table, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("outbox %s: list dead rows: %w", o.table, err)
	}
	return ids, nil
}

// Redrive makes the dead rows matching f pending again with their attempts
// reset, wakes the relays, and returns how many it changed. Their claims
// counter is kept, so a relay still holding an old claim on one stays
// fenced off.
//
// On a SchemaPlane table it needs warren's optional columns (an error
// wrapping [ErrPlaneMigrationNeeded] without them); a redriven row is
// unclaimed again, its attempts reset.
func (o *Table) Redrive(ctx context.Context, db DB, f Filter) (int64, error) {
	query, err := o.deadQuery(ctx, db, func(s planeStatements) string { return s.redrive }, o.sql.redrive)
	if err != nil {
		return 0, fmt.Errorf("outbox %s: redrive: %w", o.table, err)
	}
	var n int64
	if err := db.QueryRow(ctx, query, append(f.args(), o.channel)...).Scan(&n); err != nil {
		return 0, fmt.Errorf("outbox %s: redrive: %w", o.table, err)
	}
	return n, nil
}

// deadQuery picks the statement of an operation on dead rows: warren's, or
// on a Plane table the migrated variant's.
func (o *Table) deadQuery(ctx context.Context, db DB, plane func(planeStatements) string, warren string) (string, error) {
	if o.schema != SchemaPlane {
		return warren, nil
	}
	st, migrated, err := o.planeStatements(ctx, db)
	switch {
	case err != nil:
		return "", err
	case !migrated:
		return "", ErrPlaneMigrationNeeded
	}
	return plane(st), nil
}

// ErrPlaneRowsAreKept is returned by [Table.Purge] and [Table.Publish] on
// a SchemaPlane table: Plane's triggers write its rows, and Plane's
// cleaner deletes the processed ones.
var ErrPlaneRowsAreKept = errors.New("the rows of Plane's outbox table are written by Plane's triggers and deleted by Plane's cleaner; warren neither writes nor deletes them")

// PurgeOptions say which finished rows [Table.Purge] deletes.
type PurgeOptions struct {
	// Before is the cutoff: rows that became delivered or dead before it
	// are deleted. Required.
	Before time.Time

	// States are the states to purge, Delivered and Dead (the default is
	// both). Pending rows are never purged.
	States []State

	// BatchSize is how many rows one transaction archives and deletes.
	// Default 1000.
	BatchSize int

	// Archive, when set, receives every batch before it is deleted, inside
	// the transaction that deletes it. When it returns an error, the batch
	// is not deleted and Purge stops with an error wrapping
	// [ErrArchiveFailed]. A batch whose delete fails after a successful
	// archive is archived again by the next Purge, so Archive should be
	// idempotent (key it on event_id). A row holding a value that Row
	// cannot represent comes with its DecodeErr set and the fields it names
	// zero; an archive that cannot keep it should return an error.
	Archive func(ctx context.Context, rows []Row) error
}

// DefaultPurgeBatchSize is PurgeOptions.BatchSize's default.
const DefaultPurgeBatchSize = 1000

// ErrArchiveFailed is wrapped by Purge's error when the archive hook failed.
var ErrArchiveFailed = errors.New("archive failed; nothing of that batch was deleted")

// Purge deletes finished rows older than the cutoff, one batch per
// transaction, archiving each batch first when an Archive hook is set. It
// returns how many rows it deleted, including those of batches committed
// before an error.
//
// On a SchemaPlane table it deletes nothing and returns
// [ErrPlaneRowsAreKept].
func (o *Table) Purge(ctx context.Context, db DB, opts PurgeOptions) (int64, error) {
	if o.schema == SchemaPlane {
		return 0, fmt.Errorf("outbox %s: purge: %w", o.table, ErrPlaneRowsAreKept)
	}
	names, err := opts.states()
	if err != nil {
		return 0, err
	}
	batch := opts.BatchSize
	if batch <= 0 {
		batch = DefaultPurgeBatchSize
	}
	var total int64
	for {
		n, err := o.purgeBatch(ctx, db, names, opts.Before, batch, opts.Archive)
		total += n
		if err != nil || n < int64(batch) {
			return total, err
		}
	}
}

// states checks the options and returns the states to purge by name.
func (opts PurgeOptions) states() ([]string, error) {
	if opts.Before.IsZero() {
		return nil, fmt.Errorf("%w: PurgeOptions.Before (the cutoff) is required", ErrInvalidConfig)
	}
	states := opts.States
	if len(states) == 0 {
		states = []State{Delivered, Dead}
	}
	names := make([]string, len(states))
	for i, s := range states {
		if s != Delivered && s != Dead {
			return nil, fmt.Errorf("%w: Purge deletes only %q and %q rows, not %q", ErrInvalidConfig, Delivered, Dead, s)
		}
		names[i] = string(s)
	}
	return names, nil
}

// CountPurgeable counts the rows [Table.Purge] with opts would delete now
// (BatchSize and Archive aside): what a dry run reports, and what the
// command asks about before it purges.
func (o *Table) CountPurgeable(ctx context.Context, db DB, opts PurgeOptions) (int64, error) {
	if o.schema == SchemaPlane {
		return 0, fmt.Errorf("outbox %s: purge: %w", o.table, ErrPlaneRowsAreKept)
	}
	names, err := opts.states()
	if err != nil {
		return 0, err
	}
	var n int64
	if err := db.QueryRow(ctx, o.sql.purgeCount, names, opts.Before).Scan(&n); err != nil {
		return 0, fmt.Errorf("outbox %s: count purgeable rows: %w", o.table, err)
	}
	return n, nil
}

func (o *Table) purgeBatch(ctx context.Context, db DB, states []string, before time.Time, batch int, archive func(context.Context, []Row) error) (int64, error) {
	tx, err := db.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("outbox %s: purge: %w", o.table, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	rows, err := tx.Query(ctx, o.sql.purgeSelect, states, before, batch)
	if err != nil {
		return 0, fmt.Errorf("outbox %s: purge: select: %w", o.table, err)
	}
	found, err := collectRows(rows)
	if err != nil {
		return 0, fmt.Errorf("outbox %s: purge: select: %w", o.table, err)
	}
	if len(found) == 0 {
		return 0, nil
	}
	if archive != nil {
		if err := archive(ctx, found); err != nil {
			return 0, fmt.Errorf("outbox %s: purge: %w: %w", o.table, ErrArchiveFailed, err)
		}
	}
	// The delete runs only after the archive succeeded, in the transaction
	// that locked the rows it archived: a failed archive deletes nothing.
	ids := make([]int64, len(found))
	for i, r := range found {
		ids[i] = r.ID
	}
	tag, err := tx.Exec(ctx, o.sql.purgeDelete, ids)
	if err != nil {
		return 0, fmt.Errorf("outbox %s: purge: delete: %w", o.table, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("outbox %s: purge: commit: %w", o.table, err)
	}
	return tag.RowsAffected(), nil
}
