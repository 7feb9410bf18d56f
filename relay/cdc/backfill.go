package cdc

// The backfill: rows committed before the slot existed, or left pending
// by an earlier session, read from the table and published.

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/warrenmq/warren/internal/amqpx"
	"github.com/warrenmq/warren/internal/outboxsql"
	"github.com/warrenmq/warren/outbox"
)

// waitVisible waits until none of the transactions xids is running in
// the eyes of a new snapshot. The stream delivers a transaction as soon
// as its commit record is flushed, a moment before the committing backend
// makes it visible to other snapshots (on a busy server, milliseconds):
// a settle in that moment would not see its rows, delete none of them,
// and still move the slot past them, leaving published rows pending in
// the table for ever (the kill test found it, without a kill: a few
// transactions in a thousand on a busy machine); a redrive's refetch
// would not see the row pending and skip it. Publishing only what is
// visible also means that a consumer reading the database when the event
// arrives sees the change it describes.
func (r *Relay) waitVisible(ctx context.Context, xids []int64) error {
	wait := time.Millisecond
	for len(xids) > 0 {
		var running int
		err := r.pool.QueryRow(ctx, visibleSQL, xids).Scan(&running)
		if err != nil {
			return fmt.Errorf("wait for the stream's transactions to be visible: %w", err)
		}
		if running == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, 50*time.Millisecond)
	}
	return nil
}

// visibleSQL counts the transactions of $1 that a new snapshot would not
// see yet. The stream gives 32-bit xids and snapshots hold 64-bit ones: an
// xid is widened to the 64-bit value nearest the snapshot's xmax (the
// stream's transactions are recent, far less than 2^31 from it). A
// transaction that committed but is not visible yet may be the newest, at
// or above xmax and so in no list of running ones; pg_visible_in_snapshot
// counts it as not visible, as the trim's snapshot would.
const visibleSQL = `WITH s AS (SELECT pg_current_snapshot() AS snap, pg_snapshot_xmax(pg_current_snapshot())::text::bigint AS xmax)
	SELECT count(*) FROM s, unnest($1::bigint[]) AS t(xid),
		LATERAL (SELECT s.xmax - s.xmax % 4294967296 + t.xid AS x) AS w
	WHERE NOT pg_visible_in_snapshot((CASE
		WHEN w.x - s.xmax > 2147483648 THEN w.x - 4294967296
		WHEN s.xmax - w.x > 2147483648 THEN w.x + 4294967296
		ELSE w.x END)::text::xid8, s.snap)`

// backfill publishes the table's pending rows up to its bound (see
// boundBackfill), which a new slot does not stream if they committed
// before it, records that it has, and returns the bound. Rows that
// committed after the slot and are at or below the bound are in the
// stream as well; publishLoop reads those from the table rather than
// publishing them again. It settles each page itself, before the record:
// a dead mark must not wait for a stream position, and the stream's
// check of a row relies on the backfill's rows being trimmed.
func (r *Relay) backfill(ctx context.Context, pub *amqpx.Publisher) (int64, error) {
	bound, err := r.boundBackfill(ctx)
	if err != nil {
		return 0, err
	}
	var after int64
	for {
		var rows []outbox.Row
		err := pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) (err error) {
			if _, err = tx.Exec(ctx, backfillPlanSQL); err == nil {
				rows, err = queryRows(ctx, tx, backfillPageSQL(pgx.Identifier{r.cfg.Table}.Sanitize()), after, bound, r.cfg.BatchSize)
			}
			return err
		})
		if err != nil || len(rows) == 0 {
			if err == nil {
				err = r.markBackfilled(ctx)
			}
			return bound, err
		}
		after = rows[len(rows)-1].ID
		s, err := r.deliver(ctx, pub, rows)
		if err != nil {
			return bound, err
		}
		if err := r.settle(ctx, s); err != nil {
			return bound, err
		}
	}
}

// refetched reads the rows of ids from the table and returns the batch's
// rows in stream order, each read row in its item's place; a row no
// longer pending is left out.
func (r *Relay) refetched(ctx context.Context, items []item, decoded []outbox.Row, ids []int64) ([]outbox.Row, error) {
	read, err := r.pendingRows(ctx, ids)
	if err != nil {
		return nil, err
	}
	byID := make(map[int64]outbox.Row, len(read))
	for _, row := range read {
		byID[row.ID] = row
	}
	out := make([]outbox.Row, 0, len(decoded)+len(read))
	for _, it := range items {
		switch {
		case it.row == nil:
		case !it.refetch:
			out = append(out, decoded[0])
			decoded = decoded[1:]
		default:
			if row, ok := byID[it.row.ID]; ok {
				out = append(out, row)
			}
		}
	}
	return out, nil
}

// pendingRows reads the rows of ids that are still pending.
func (r *Relay) pendingRows(ctx context.Context, ids []int64) ([]outbox.Row, error) {
	return queryRows(ctx, r.pool, pendingRowsSQL(pgx.Identifier{r.cfg.Table}.Sanitize()), ids)
}

func queryRows(ctx context.Context, db interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, sql string, args ...any) ([]outbox.Row, error) {
	rs, err := db.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	var out []outbox.Row
	for rs.Next() {
		row, err := outboxsql.ScanRow[outbox.Row](rs)
		if err != nil {
			return nil, err
		}
		out = append(out, row)
	}
	return out, rs.Err()
}

// backfillPageSQL is a page of the backfill, after the cursor $1 and up to
// the bound $2, read
// with backfillPlanSQL in force: the planner must walk the primary key in
// its order. On a table whose statistics say it is small, which is how a
// backlog meets a new slot, its plan otherwise read every pending row
// after the cursor (through the claim index, or the whole table) and
// sorted them for each page, which made a backfill quadratic.
func backfillPageSQL(t string) string {
	return `SELECT ` + outboxsql.Columns + ` FROM ` + t + ` WHERE id > $1 AND id <= $2 AND state = 'pending' ORDER BY id LIMIT $3`
}

const backfillPlanSQL = `SET LOCAL enable_sort = off`

func pendingRowsSQL(t string) string {
	return `SELECT ` + outboxsql.Columns + ` FROM ` + t + ` WHERE id = ANY($1::bigint[]) AND (state = 'pending') IS TRUE ORDER BY id`
}
