package cdc

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/warrenmq/warren/internal/pgdurable"
	"github.com/warrenmq/warren/outbox"
)

// ErrNoTable is returned by [Relay.Run] when the outbox table does not
// exist: waiting does not create it, and the polling relay refuses it too.
var ErrNoTable = errors.New("outbox table does not exist")

// ErrWALLevel says the server cannot stream its changes: wal_level is not
// logical.
var ErrWALLevel = errors.New("wal_level is not logical: set wal_level = logical and restart PostgreSQL (scripts/services.sh does both for the local services; on a managed Postgres see docs/cdc.md)")

// ErrNotPublished is returned by [Relay.Run] when the publication does not
// publish the configured table: the table was rebuilt by a swap (renamed
// away, a copy renamed in), and the publication follows the old table's
// OID, so no row written to the new one is ever streamed. Waiting does
// not mend it. Retire the group ([DropSlot], "--drop-slot"; it drops the
// publication too) and start the relay again: it makes a publication of
// the current table and a new slot, whose backfill publishes the rows the
// new table holds. The relay does not alter the publication itself: the
// rows written to the new table before the alteration would never be
// streamed.
var ErrNotPublished = errors.New("the publication does not publish the outbox table")

// ErrOtherGroup is returned by [Relay.Run] when another relay group (a
// slot of another name that still exists) is recorded for the same
// outbox table. One table serves one CDC relay group: each group trims
// the rows it published, which the other may not have published yet, and
// a group that meets a transaction it partly published reads its rows
// from the table, so rows the other group trimmed would be lost to it.
// Retire the other group first ([DropSlot], "--drop-slot --slot NAME").
var ErrOtherGroup = errors.New("another CDC relay group serves this outbox table")

// ErrNotLogged is returned by [Relay.Run] when the outbox table, one of
// its partitions or its state table (the outbox's name with "_cdc") is
// UNLOGGED or temporary: PostgreSQL empties an unlogged table when it
// recovers from a crash, losing the outbox's events, or the state
// table's record of what was published. ALTER TABLE … SET LOGGED mends
// it.
var ErrNotLogged = pgdurable.ErrNotLogged

// SQLSTATEs the setup and the stream tell apart.
const (
	sqlDuplicateObject = "42710" // a publication or slot of that name exists
	sqlObjectInUse     = "55006" // another connection streams the slot
)

// stateTable is the table beside the outbox that records, per slot,
// whether the rows written before the slot existed have been published,
// and the highest id the backfill may have published (backfilled_to): a
// streamed row at or below it is read from the table, in every session,
// because the backfill may have published and trimmed it. settled_lsn is
// the commit position of the latest transaction some of whose rows a
// settle trimmed or made dead, written in the settle's own transaction: a
// session streams such a transaction again, whole, while the slot has not
// passed it, and reads its rows from the table.
func stateTable(table string) string { return pgx.Identifier{table + "_cdc"}.Sanitize() }

// slotState is what the state table says of the slot at a session's
// start.
type slotState struct {
	// backfill: the rows the table held before the slot existed may
	// still be unpublished (a slot streams only what commits after it was
	// made).
	backfill bool
	// backfilledTo is the backfill's recorded bound.
	backfilledTo int64
	// settled is settled_lsn: a transaction whose commit is at or before
	// it may have been partly published and trimmed by an earlier session.
	settled pglogrepl.LSN
}

// setup makes sure the server can stream, and that the publication, the
// slot and the slot's state row exist, and reads the state row.
func (r *Relay) setup(ctx context.Context) (st slotState, err error) {
	db := r.pool
	var level string
	if err := db.QueryRow(ctx, `SHOW wal_level`).Scan(&level); err != nil {
		return st, fmt.Errorf("read wal_level: %w", err)
	}
	if level != "logical" {
		return st, fmt.Errorf("%w (it is %q)", ErrWALLevel, level)
	}
	var tableExists bool
	if err := db.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, pgx.Identifier{r.cfg.Table}.Sanitize()).Scan(&tableExists); err != nil {
		return st, err
	}
	if !tableExists {
		return st, fmt.Errorf("%w: %s: run \"warren outbox migrate\" (or outbox.Table.Migrate) first", ErrNoTable, r.cfg.Table)
	}
	// The outbox, and the state table whose settled_lsn and backfill
	// bound say what was published: emptied by a crash's recovery, the
	// one loses its events and the other makes the next session publish
	// again every row it settled since the slot's last saved position.
	// (Postgres would refuse to publish an unlogged outbox, less clearly.)
	if err := pgdurable.Check(ctx, db, pgx.Identifier{r.cfg.Table}.Sanitize(), stateTable(r.cfg.Table)); err != nil {
		return st, err // ErrNotLogged when it found one
	}
	if err := r.checkOneGroup(ctx); err != nil { // before anything is made for a refused group
		return st, err
	}
	// Updates are published as well as inserts because Redrive turns a
	// dead row back to pending with an UPDATE; the relay ignores every
	// other update (its own dead marks among them).
	pub := pgx.Identifier{r.cfg.Publication}.Sanitize()
	if err := ignoreDuplicate(db.Exec(ctx, `DO $$ BEGIN
		IF NOT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = `+quoteLiteral(r.cfg.Publication)+`) THEN
			CREATE PUBLICATION `+pub+` FOR TABLE `+pgx.Identifier{r.cfg.Table}.Sanitize()+` WITH (publish = 'insert, update');
		END IF;
	END $$`)); err != nil {
		return st, fmt.Errorf("create publication %s: %w", r.cfg.Publication, err)
	}
	if err := r.checkPublished(ctx); err != nil {
		return st, err
	}
	if _, err := db.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+stateTable(r.cfg.Table)+` (
		slot          text        PRIMARY KEY,
		created_at    timestamptz NOT NULL DEFAULT now(),
		backfilled_at timestamptz,
		`+strings.Join(stateColumns[:], ",\n\t\t")+`)`); err != nil {
		return st, fmt.Errorf("create %s: %w", stateTable(r.cfg.Table), err)
	}
	if err := r.upgradeState(ctx); err != nil {
		return st, err
	}
	var plugin, database, currentDB string
	if err := db.QueryRow(ctx, `SELECT current_database()`).Scan(&currentDB); err != nil {
		return st, err
	}
	err = db.QueryRow(ctx, `SELECT plugin, database FROM pg_replication_slots WHERE slot_name = $1`, r.cfg.Slot).Scan(&plugin, &database)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		// A slot that is missing may have been lost (a failover to a
		// replica, a restore, max_slot_wal_keep_size, a hand-made drop)
		// with rows still pending that it never streamed: the new slot
		// must backfill, whatever the state table remembers of the old.
		if _, err := db.Exec(ctx, `INSERT INTO `+stateTable(r.cfg.Table)+` (slot) VALUES ($1)
			ON CONFLICT (slot) DO UPDATE SET backfilled_at = NULL, settled_lsn = '0/0'`, r.cfg.Slot); err != nil {
			return st, fmt.Errorf("reset the state of slot %s: %w", r.cfg.Slot, err)
		}
		// Creating the slot waits for the transactions running now to
		// end; what commits after its consistent point is streamed, and
		// what committed before is read by the backfill, which starts
		// after this returns. A concurrent relay may win the race.
		err = ignoreDuplicate(db.Exec(ctx, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, r.cfg.Slot))
		if err != nil {
			return st, fmt.Errorf("create replication slot %s: %w", r.cfg.Slot, err)
		}
		r.log.Info("created replication slot", "publication", r.cfg.Publication)
	case err != nil:
		return st, fmt.Errorf("read replication slot %s: %w", r.cfg.Slot, err)
	case database != currentDB:
		return st, fmt.Errorf("replication slot %s belongs to database %s, not %s: slot names are the server's, so name another slot (Config.Slot, --slot)", r.cfg.Slot, database, currentDB)
	case plugin != "pgoutput":
		return st, fmt.Errorf("replication slot %s uses plugin %q, not pgoutput: name another slot", r.cfg.Slot, plugin)
	}
	// Read before written: standing-by relays run this every
	// StandbyRetry, and should not write WAL each time.
	var done *time.Time
	settled := "0/0"
	err = db.QueryRow(ctx, `SELECT backfilled_at, backfilled_to, settled_lsn::text FROM `+stateTable(r.cfg.Table)+` WHERE slot = $1`, r.cfg.Slot).
		Scan(&done, &st.backfilledTo, &settled)
	if errors.Is(err, pgx.ErrNoRows) {
		_, err = db.Exec(ctx, `INSERT INTO `+stateTable(r.cfg.Table)+` (slot) VALUES ($1) ON CONFLICT (slot) DO NOTHING`, r.cfg.Slot)
	}
	if err != nil {
		return st, fmt.Errorf("read the state of slot %s: %w", r.cfg.Slot, err)
	}
	st.backfill = done == nil
	st.settled, err = pglogrepl.ParseLSN(settled)
	return st, err
}

// checkPublished fails with [ErrNotPublished] unless the publication
// publishes the table now of that name (pg_publication_tables also covers
// a publication FOR ALL TABLES).
func (r *Relay) checkPublished(ctx context.Context) error {
	var ok bool
	if err := r.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_publication_tables
		WHERE pubname = $1 AND format('%I.%I', schemaname, tablename)::regclass = to_regclass($2))`,
		r.cfg.Publication, pgx.Identifier{r.cfg.Table}.Sanitize()).Scan(&ok); err != nil {
		return fmt.Errorf("read publication %s: %w", r.cfg.Publication, err)
	}
	if !ok {
		return fmt.Errorf("%w: publication %s does not publish table %s (was the table rebuilt by a swap? the publication follows the old one): retire the group with --drop-slot and start again, and its backfill publishes the rows the table holds", ErrNotPublished, r.cfg.Publication, r.cfg.Table)
	}
	return nil
}

// checkOneGroup fails with [ErrOtherGroup] when the state table records
// another slot that still exists. A slot that is gone (dropped, lost)
// leaves only its state row, which is no group.
func (r *Relay) checkOneGroup(ctx context.Context) error {
	var exists bool
	if err := r.pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, stateTable(r.cfg.Table)).Scan(&exists); err != nil || !exists {
		return err
	}
	var other string
	err := r.pool.QueryRow(ctx, `SELECT slot FROM `+stateTable(r.cfg.Table)+`
		WHERE slot <> $1 AND slot IN (SELECT slot_name FROM pg_replication_slots) ORDER BY slot LIMIT 1`, r.cfg.Slot).Scan(&other)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil
	case err != nil:
		return fmt.Errorf("read the groups of table %s: %w", r.cfg.Table, err)
	}
	return fmt.Errorf("%w: table %s is served by slot %s, and this relay names slot %s: one table serves one CDC relay group, because each group trims the rows it published, which the other may still need; retire the other group first (warren relay run --mode cdc --table %s --slot %s --drop-slot)",
		ErrOtherGroup, r.cfg.Table, other, r.cfg.Slot, r.cfg.Table, other)
}

// stateColumns are the state table's columns that earlier versions did
// not make; upgradeState adds those missing.
var stateColumns = [...]string{
	`backfilled_to bigint NOT NULL DEFAULT 0`,
	`settled_lsn pg_lsn NOT NULL DEFAULT '0/0'`,
}

// upgradeState adds the columns of stateColumns that a state table made
// by an earlier version lacks. Looked up first: an ALTER takes a lock that
// is written to the WAL, and standing-by relays run this every
// StandbyRetry.
func (r *Relay) upgradeState(ctx context.Context) error {
	names := make([]string, len(stateColumns))
	for i, c := range stateColumns {
		names[i], _, _ = strings.Cut(c, " ")
	}
	var have int
	if err := r.pool.QueryRow(ctx, `SELECT count(*) FROM pg_attribute WHERE attrelid = to_regclass($1) AND attname = ANY($2) AND NOT attisdropped`,
		stateTable(r.cfg.Table), names).Scan(&have); err != nil {
		return err
	}
	if have == len(names) {
		return nil
	}
	// Bounded: waiting for its lock behind a long transaction would
	// queue every reader of the table (standing-by relays, the console)
	// behind it. The session fails and is tried again.
	err := pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '5s'`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `ALTER TABLE `+stateTable(r.cfg.Table)+` ADD COLUMN IF NOT EXISTS `+
			strings.Join(stateColumns[:], `, ADD COLUMN IF NOT EXISTS `))
		return err
	})
	if err != nil {
		return fmt.Errorf("add columns %v to %s (made by an earlier version; the relay's role must own it): %w", names, stateTable(r.cfg.Table), err)
	}
	return nil
}

// boundBackfill records, before the backfill publishes a row, the highest
// id it will read: the table's highest id now, which the slot already
// streams past (the slot exists, so a row above it commits after the slot
// and is in the stream), or the recorded bound if higher. Written first so
// that a relay that dies mid-backfill, or after it and before the stream
// passes the rows the two share, leaves the bound for the next session,
// which reads those rows from the table rather than publishing the
// stream's copy of rows the backfill published and trimmed.
func (r *Relay) boundBackfill(ctx context.Context) (int64, error) {
	var bound int64
	err := r.pool.QueryRow(ctx, `UPDATE `+stateTable(r.cfg.Table)+`
		SET backfilled_to = greatest(backfilled_to, (SELECT coalesce(max(id), 0) FROM `+pgx.Identifier{r.cfg.Table}.Sanitize()+`))
		WHERE slot = $1 RETURNING backfilled_to`, r.cfg.Slot).Scan(&bound)
	if err != nil {
		// No row: the slot was dropped (DropSlot) under this session.
		return 0, fmt.Errorf("record the backfill's bound in %s: %w", stateTable(r.cfg.Table), err)
	}
	return bound, nil
}

// markBackfilled records that every row written before the slot existed
// has been published.
func (r *Relay) markBackfilled(ctx context.Context) error {
	_, err := r.pool.Exec(ctx, `UPDATE `+stateTable(r.cfg.Table)+` SET backfilled_at = now() WHERE slot = $1`, r.cfg.Slot)
	return err
}

func ignoreDuplicate(_ pgconn.CommandTag, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == sqlDuplicateObject {
		return nil
	}
	return err
}

// quoteLiteral quotes a name that has passed slotNameRE as an SQL string.
func quoteLiteral(s string) string { return "'" + s + "'" }

// SlotStatus is what Postgres says of a relay group's slot.
type SlotStatus struct {
	Slot string
	// Active says a relay is streaming the slot now; PID is its
	// walsender's process id.
	Active bool
	PID    int
	// LagBytes is how much WAL the server keeps for the slot: from the
	// position every event before which is confirmed and trimmed, to the
	// server's current position. It grows while no relay streams and
	// while the broker refuses; the server keeps that WAL on disk until
	// the slot moves on (bounded only by max_slot_wal_keep_size).
	LagBytes int64
	// WALStatus is the server's verdict on that WAL (reserved, extended,
	// unreserved, lost); "lost" means max_slot_wal_keep_size removed WAL
	// the slot still needed and the slot cannot stream again.
	WALStatus string
	// OldestPending is how long the oldest row still in the table has
	// waited: the relay trims a row once its message is confirmed, so
	// this is the group's lag in time.
	OldestPending time.Duration
}

// Status reads the slot's status and the age of the table's oldest
// pending row. It returns an error wrapping pgx.ErrNoRows when the slot
// does not exist.
func Status(ctx context.Context, db outbox.DB, table, slot string) (SlotStatus, error) {
	s := SlotStatus{Slot: slot}
	var pid *int32
	var oldest float64
	err := db.QueryRow(ctx, `SELECT active, active_pid,
			coalesce(pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn), 0)::bigint, coalesce(wal_status, ''),
			(SELECT coalesce(extract(epoch FROM now() - min(inserted_at)), 0)::float8 FROM `+pgx.Identifier{table}.Sanitize()+` WHERE state = 'pending')
		FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&s.Active, &pid, &s.LagBytes, &s.WALStatus, &oldest)
	if err != nil {
		return s, fmt.Errorf("replication slot %s: %w", slot, err)
	}
	if pid != nil {
		s.PID = int(*pid)
	}
	s.OldestPending = time.Duration(oldest * float64(time.Second))
	return s, nil
}

// DropSlot retires a relay group: it forgets the slot's state row, drops
// the publication and drops the slot, so the server stops keeping WAL for
// it. Stop every relay of the group first: it fails while one streams the
// slot, and a standby could make a new one. In that order, whatever is
// left half-done (a stop between steps, a relay that started meanwhile)
// leaves a slot without a record of its backfill, which the next relay
// runs again: duplicates, never a loss. Rows still pending stay in the
// table, where a polling relay, or a CDC relay that makes a new slot,
// publishes them.
func DropSlot(ctx context.Context, db outbox.DB, table, slot, publication string) error {
	if !slotNameRE.MatchString(slot) || !slotNameRE.MatchString(publication) {
		return fmt.Errorf("%w: slot %q or publication %q is not a valid name", ErrInvalidConfig, slot, publication)
	}
	var exists bool
	if err := db.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, stateTable(table)).Scan(&exists); err != nil {
		return err
	}
	if exists {
		if _, err := db.Exec(ctx, `DELETE FROM `+stateTable(table)+` WHERE slot = $1`, slot); err != nil {
			return fmt.Errorf("forget slot %s: %w", slot, err)
		}
	}
	if _, err := db.Exec(ctx, `DROP PUBLICATION IF EXISTS `+pgx.Identifier{publication}.Sanitize()); err != nil {
		return fmt.Errorf("drop publication %s: %w", publication, err)
	}
	if _, err := db.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1`, slot); err != nil {
		return fmt.Errorf("drop replication slot %s: %w", slot, err)
	}
	return nil
}

// Slots reads the status of every slot that relays have made for table,
// as its state table records them; none when no CDC relay ever ran on it.
// A recorded slot that no longer exists is reported with WALStatus
// "dropped".
func Slots(ctx context.Context, db outbox.DB, table string) ([]SlotStatus, error) {
	var exists bool
	if err := db.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, stateTable(table)).Scan(&exists); err != nil || !exists {
		return nil, err
	}
	rows, err := db.Query(ctx, `SELECT slot FROM `+stateTable(table)+` ORDER BY slot`)
	if err != nil {
		return nil, err
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	out := make([]SlotStatus, 0, len(names))
	for _, name := range names {
		s, err := Status(ctx, db, table, name)
		if errors.Is(err, pgx.ErrNoRows) {
			s, err = SlotStatus{Slot: name, WALStatus: "dropped"}, nil
		}
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}
