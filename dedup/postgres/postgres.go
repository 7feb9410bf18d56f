package postgres

import (
	"cmp"
	"context"
	"crypto/rand"
	_ "embed"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/warrenmq/warren/dedup"
	"github.com/warrenmq/warren/dedup/internal/coalesce"
	"github.com/warrenmq/warren/dedup/internal/storedkey"
	"github.com/warrenmq/warren/internal/pgdurable"
)

// Config configures a [Store]. The zero value is ready to use.
type Config struct {
	// Table is the table that holds the keys: a name, or schema.name,
	// each part a letter or underscore followed by letters, digits and
	// underscores, the table's name at most 48 bytes (its index's name
	// adds a suffix within Postgres's 63). Default "warren_dedup".
	Table string

	// Retention is how long a completed key stays done. Default 7 days.
	Retention time.Duration

	// PurgeBatch is how many rows one statement of [Store.Purge] deletes.
	// Default 1000.
	PurgeBatch int

	// Batching: a batch is one round trip and one transaction, which
	// commits once for all its calls. Default MaxBatch 128, at most 1024:
	// a batch takes a transaction-level advisory lock per key, and
	// Postgres's shared lock table (max_locks_per_transaction ×
	// max_connections, 6,400 by default) must hold them beside every other
	// session's. Each batch in flight takes a connection of the pool;
	// default MaxBatchesInFlight 1: one batch in flight lets the next grow
	// while the last commits, which measured fastest.
	dedup.Batching

	// CallTimeout bounds each statement [Store.WithinTx] runs of its own —
	// the begin, the done-mark with the commit, a rollback — so that a
	// stalled database holds the handler's worker no longer than this
	// beyond the handler's own work, which it does not bound. (Claim,
	// Complete and Release are bounded by their callers' contexts, as
	// dedup.Bounded and the Dedup middleware bound them.) Default 10
	// seconds.
	CallTimeout time.Duration
}

// Defaults of [Config].
const (
	DefaultTable              = "warren_dedup"
	DefaultRetention          = 7 * 24 * time.Hour
	DefaultPurgeBatch         = 1000
	DefaultMaxBatch           = 128
	DefaultMaxBatchesInFlight = 1
	DefaultCallTimeout        = 10 * time.Second
)

const indexSuffix = "_expires_at_idx"

// completeSet is the update of a completion's ON CONFLICT: the claim's
// own row becomes (or stays) its done-mark; another claim's row is
// overwritten only once it has expired.
const completeSet = `
	token      = excluded.token,
	done_at    = CASE WHEN d.token = excluded.token THEN coalesce(d.done_at, now()) ELSE now() END,
	expires_at = CASE WHEN d.token = excluded.token AND d.done_at IS NOT NULL THEN d.expires_at ELSE excluded.expires_at END
WHERE d.token = excluded.token OR d.expires_at <= now()`

// maxBatchLimit bounds Config.MaxBatch.
const maxBatchLimit = 1024

var identPart = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Store is a [dedup.Store] and [dedup.Transactor] on a Postgres table. It
// is safe for concurrent use.
type Store struct {
	pool      *pgxpool.Pool
	table     string // quoted, possibly schema-qualified
	retention time.Duration
	batch     int
	timeout   time.Duration // Config.CallTimeout

	claimSQL, completeSQL, markSQL, releaseSQL, purgeSQL, schemaSQL string
	lockManySQL, claimManySQL, completeManySQL, releaseManySQL      string
	lockClass                                                       int32 // of the batches' advisory locks

	batcher *coalesce.Batcher[*call] // nil when batching is off
	// oneByOne counts batches that failed and were sent again call by
	// call; tests read it.
	oneByOne atomic.Int64
	// abandonedReleased counts the claims of callers who gave up that
	// releaseOfAbandoned gave back; tests read it.
	abandonedReleased atomic.Int64
}

var (
	_ dedup.Store      = (*Store)(nil)
	_ dedup.Transactor = (*Store)(nil)
)

//go:embed schema.sql
var schemaTemplate string

// New returns a store on pool. It does no I/O; call [Store.Migrate] before
// first use to create the table.
func New(pool *pgxpool.Pool, cfg Config) (*Store, error) {
	if pool == nil {
		return nil, errors.New("dedup/postgres: nil pool")
	}
	cfg.Table = cmp.Or(cfg.Table, DefaultTable)
	if cfg.Retention < 0 || cfg.PurgeBatch < 0 || cfg.CallTimeout < 0 {
		return nil, fmt.Errorf("dedup/postgres: negative Retention (%v), PurgeBatch (%d) or CallTimeout (%v)",
			cfg.Retention, cfg.PurgeBatch, cfg.CallTimeout)
	}
	cfg.CallTimeout = cmp.Or(cfg.CallTimeout, DefaultCallTimeout)
	cfg.Retention = cmp.Or(cfg.Retention, DefaultRetention)
	if cfg.Retention < time.Millisecond {
		return nil, fmt.Errorf("dedup/postgres: retention %v is below the store's 1ms resolution", cfg.Retention)
	}
	cfg.PurgeBatch = cmp.Or(cfg.PurgeBatch, DefaultPurgeBatch)
	batching, err := coalesce.Configure("dedup/postgres", cfg.Batching, dedup.Batching{MaxBatch: DefaultMaxBatch, MaxBatchesInFlight: DefaultMaxBatchesInFlight}, maxBatchLimit)
	if err != nil {
		return nil, err
	}
	table, index, err := quoteTable(cfg.Table)
	if err != nil {
		return nil, err
	}
	s := &Store{pool: pool, table: table, retention: cfg.Retention, batch: cfg.PurgeBatch, timeout: cfg.CallTimeout}
	s.schemaSQL = strings.NewReplacer("{{table}}", table, "{{index}}", index).Replace(schemaTemplate)

	// A claim writes the row in every case — inserting it, taking it over,
	// or rewriting it unchanged — so that ON CONFLICT locks the row and the
	// RETURNING clause reads its latest committed version. An ON CONFLICT
	// … WHERE that skipped the write would return no row, and a second
	// look would read a snapshot older than the conflict: a second round
	// trip that can still answer wrong.
	s.claimSQL = `INSERT INTO ` + table + ` AS d (key, token, expires_at)
VALUES ($1, $2, now() + $3 * interval '1 millisecond')
ON CONFLICT (key) DO UPDATE SET
	token      = CASE WHEN d.expires_at <= now() THEN excluded.token      ELSE d.token      END,
	done_at    = CASE WHEN d.expires_at <= now() THEN NULL                ELSE d.done_at    END,
	expires_at = CASE WHEN d.expires_at <= now() THEN excluded.expires_at ELSE d.expires_at END
RETURNING d.token = $2, d.done_at IS NOT NULL`
	// A completion writes the claim's done-mark unless another claim holds
	// the key now (dedup.Store's contract): over its own row, expired or
	// not, over an expired row of another claim's, and as a new row when
	// the key has none (its lease was released, or purged after it ran
	// out). An expired row means the same as no row, so Purge changes no
	// completion's answer. Completing a completed claim again matches its
	// row and leaves it as it is (SET reads the row's old values).
	s.completeSQL = `INSERT INTO ` + table + ` AS d (key, token, done_at, expires_at)
VALUES ($1, $2, now(), now() + $3 * interval '1 millisecond')
ON CONFLICT (key) DO UPDATE SET` + completeSet
	// The transactional mode's done-mark: the completion, failing when it
	// writes nothing (commitWithMark says why).
	s.markSQL = `WITH mark AS (` + s.completeSQL + `
RETURNING 1)
SELECT 1 / count(*) FROM mark`
	s.releaseSQL = `DELETE FROM ` + table + ` WHERE key = $1 AND token = $2 AND done_at IS NULL`
	s.purgeSQL = `DELETE FROM ` + table + ` WHERE key IN (
	SELECT key FROM ` + table + ` WHERE expires_at < now() LIMIT $1 FOR UPDATE SKIP LOCKED)`
	s.renderBatchSQL(table)
	s.lockClass = lockClass(table)
	if s.batcher = coalesce.NewFor(batching, s.sendBatch); s.batcher != nil {
		s.batcher.Abandoned = coalesce.Undo(s.sendBatch, s.releaseOfAbandoned)
	}
	return s, nil
}

// quoteTable validates a configured table name and returns it and its
// index's name quoted for SQL.
func quoteTable(name string) (table, index string, err error) {
	parts := strings.Split(name, ".")
	if len(parts) > 2 {
		return "", "", fmt.Errorf("dedup/postgres: table %q: want name or schema.name", name)
	}
	for _, p := range parts {
		if !identPart.MatchString(p) {
			return "", "", fmt.Errorf("dedup/postgres: table %q: %q is not a plain identifier (letters, digits, underscores, not starting with a digit)", name, p)
		}
		if len(p) > 63 {
			return "", "", fmt.Errorf("dedup/postgres: table %q: %q is longer than 63 bytes", name, p)
		}
	}
	last := parts[len(parts)-1]
	if len(last)+len(indexSuffix) > 63 {
		return "", "", fmt.Errorf("dedup/postgres: table %q: name longer than %d bytes", name, 63-len(indexSuffix))
	}
	return pgx.Identifier(parts).Sanitize(), pgx.Identifier{last + indexSuffix}.Sanitize(), nil
}

// Migrate creates the store's table and index if they do not exist. It is
// safe to call from many replicas at once: an advisory lock serialises the
// DDL, which Postgres would otherwise let race into a duplicate-key error.
func (s *Store) Migrate(ctx context.Context) error {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('warren/dedup/postgres migrate'))`); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, s.schemaSQL); err != nil {
			return err
		}
		// Postgres empties an UNLOGGED table (or partition) when it
		// recovers from a crash or an immediate shutdown: every done-mark
		// would go, and each event redelivered after it would be handled
		// twice.
		if err := pgdurable.Check(ctx, tx, s.table); err != nil {
			return fmt.Errorf("%w; the store must keep its done-marks", err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("dedup/postgres: migrate %s: %w", s.table, err)
	}
	return nil
}

// Claim implements [dedup.Store] in one statement, which it shares with
// the calls of other goroutines made at the same time.
func (s *Store) Claim(ctx context.Context, key string, lease time.Duration) (dedup.Claim, error) {
	if key == "" {
		return dedup.Claim{}, errors.New("dedup/postgres: claim: empty key")
	}
	if lease < time.Millisecond {
		return dedup.Claim{}, fmt.Errorf("dedup/postgres: claim %q: lease must be at least 1ms, got %v", key, lease)
	}
	op := &call{kind: claimCall, key: rowKey(key), token: rand.Text(), lease: lease.Milliseconds()}
	if err := s.do(ctx, op); err != nil {
		return dedup.Claim{}, fmt.Errorf("dedup/postgres: claim %q: %w", key, refused(err))
	}
	switch {
	case op.acquired:
		return dedup.Claim{Key: key, Token: op.token, Result: dedup.Acquired}, nil
	case op.done:
		return dedup.Claim{Key: key, Result: dedup.Done}, nil
	default:
		return dedup.Claim{Key: key, Result: dedup.Busy}, nil
	}
}

// Complete implements [dedup.Store] in one statement, which it shares with
// the calls of other goroutines made at the same time. A lease that
// expired without being taken over still holds its key and completes.
func (s *Store) Complete(ctx context.Context, c dedup.Claim) error {
	if err := checkHeld(c); err != nil {
		return err
	}
	op := &call{kind: completeCall, key: rowKey(c.Key), token: c.Token}
	if err := s.do(ctx, op); err != nil {
		return fmt.Errorf("dedup/postgres: complete %q: %w", c.Key, refused(err))
	}
	if !op.held {
		return fmt.Errorf("dedup/postgres: complete %q: %w", c.Key, dedup.ErrLeaseLost)
	}
	return nil
}

// commitWithMark writes c's done-mark in tx and commits tx, both in one
// round trip: the mark and the COMMIT go out together in one pipeline.
// The mark must not commit when it writes nothing (another claim holds
// the key: the lease was lost), and the pipeline cannot wait to look, so
// markSQL fails the statement then (a division by zero, which nothing
// else in it can raise): Postgres skips the rest of the pipeline after an
// error, the COMMIT with it, and the transaction stays open and aborted
// for the caller to roll back.
func (s *Store) commitWithMark(ctx context.Context, tx pgx.Tx, c dedup.Claim) error {
	var b pgx.Batch
	// Whatever the role's or database's setting: the message is acked once
	// this returns, so a commit a crash could still take back (with the
	// handler's writes) would lose the event's effect for good.
	b.Queue("SET LOCAL synchronous_commit = on")
	b.Queue(s.markSQL, rowKey(c.Key), c.Token, s.retention.Milliseconds())
	b.Queue("commit")
	br := tx.SendBatch(ctx, &b)
	_, setErr := br.Exec()
	_, markErr := br.Exec()
	tag, commitErr := br.Exec()
	closeErr := br.Close()
	var pgErr *pgconn.PgError
	switch {
	case errors.As(markErr, &pgErr) && pgErr.Code == "22012": // division_by_zero
		return fmt.Errorf("dedup/postgres: complete %q: %w", c.Key, dedup.ErrLeaseLost)
	case setErr != nil || markErr != nil:
		return fmt.Errorf("dedup/postgres: complete %q: %w", c.Key, refused(cmp.Or(setErr, markErr)))
	case commitErr == nil && tag.String() == "ROLLBACK":
		commitErr = pgx.ErrTxCommitRollback
	}
	if err := cmp.Or(commitErr, closeErr); err != nil {
		return fmt.Errorf("dedup/postgres: commit %q: %w", c.Key, refused(err))
	}
	return nil
}

// rowKey is the key column's value for key: storedkey.Bounded's — key
// itself, or for a key longer than storedkey.MaxLen its digest, which keeps
// the btree entry within its limit of about 2.7 kB — except that a key text
// cannot hold (a NUL byte, invalid UTF-8) is always stored as its digest.
// Any key a caller passes thus works, rather than failing every claim of
// its event.
func rowKey(key string) string {
	if !utf8.ValidString(key) || strings.ContainsRune(key, 0) {
		return storedkey.Digest(key)
	}
	return storedkey.Bounded(key)
}

// Release implements [dedup.Store] in one statement, which it shares with
// the calls of other goroutines made at the same time. It deletes the
// key's row only while it is this claim's lease, never a done-mark.
func (s *Store) Release(ctx context.Context, c dedup.Claim) error {
	if err := checkHeld(c); err != nil {
		return err
	}
	op := &call{kind: releaseCall, key: rowKey(c.Key), token: c.Token}
	if err := s.do(ctx, op); err != nil {
		return fmt.Errorf("dedup/postgres: release %q: %w", c.Key, refused(err))
	}
	return nil
}

// Purge deletes the rows whose lease or retention has ended, PurgeBatch
// rows per statement, until none are left, and returns how many it
// deleted. Run it periodically (hourly is plenty); the store is correct
// without it, only larger.
//
// Deleting needs no prior durable write: an expired row already means the
// same as no row to every claim, so removing it changes no answer.
func (s *Store) Purge(ctx context.Context) (int64, error) {
	var total int64
	for {
		tag, err := s.pool.Exec(ctx, s.purgeSQL, s.batch)
		if err != nil {
			return total, fmt.Errorf("dedup/postgres: purge %s: %w", s.table, err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < int64(s.batch) {
			return total, nil
		}
	}
}

// WithinTx implements [dedup.Transactor]: it begins a transaction, calls
// fn with a context that carries it (get it with [Tx]), and when fn returns
// nil writes c's done-mark in the same transaction and commits. When fn
// fails, or c no longer holds the key (ErrLeaseLost: the key was taken
// over while fn ran), everything fn wrote is rolled back with the mark.
//
// fn must do its database work through the transaction; writes made on
// another connection commit on their own and are not covered.
func (s *Store) WithinTx(ctx context.Context, c dedup.Claim, fn func(ctx context.Context) error) error {
	if err := checkHeld(c); err != nil {
		return err
	}
	bctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	// The connection rather than pool.Begin's transaction, which would send
	// a ROLLBACK before it gave the connection back even after
	// commitWithMark committed. Release returns it to the pool once its
	// transaction has ended, and closes it otherwise, which ends it.
	conn, err := s.pool.Acquire(bctx)
	if err != nil {
		return fmt.Errorf("dedup/postgres: begin: %w", refused(err))
	}
	defer conn.Release()
	tx, err := conn.Begin(bctx)
	if err != nil {
		return fmt.Errorf("dedup/postgres: begin: %w", refused(err))
	}
	committed := false
	defer func() {
		if committed {
			return
		}
		// This runs even when ctx has ended (a handler timeout), and keeps
		// fn's error as the result: a failed rollback closes the
		// connection, which rolls back as well.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.timeout)
		defer cancel()
		_ = tx.Rollback(rctx)
	}()
	if err := fn(context.WithValue(ctx, txKey{}, tx)); err != nil {
		return err
	}
	// fn's work is done: the mark and the commit run even if ctx ends now
	// (a handler timeout at the last moment), bounded by the store's own
	// timeout rather than by nothing.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.timeout)
	defer cancel()
	if err := s.commitWithMark(cctx, tx, c); err != nil {
		return err
	}
	committed = true
	return nil
}

type txKey struct{}

// refused marks err as the call's own ([dedup.ErrRefused]) when Postgres
// answered it with an error about the statement's data — a data exception
// (class 22), a violated constraint (23), a program limit such as an index
// row too large (54) — or about a transaction the handler broke (25P02).
// Every other error, Postgres's answers that it cannot serve now among
// them (connection exceptions, resources, operator intervention such as a
// restart or statement_timeout, a read-only replica, a missing table),
// stays the store's.
func refused(err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return err
	}
	switch class := pgErr.Code[:min(2, len(pgErr.Code))]; class {
	case "22", "23", "54":
		return dedup.Refused(err)
	}
	if pgErr.Code == "25P02" { // in_failed_sql_transaction
		return dedup.Refused(err)
	}
	return err
}

// Tx returns the transaction [Store.WithinTx] runs the handler in, and
// false outside one (a handler run without the Dedup middleware's
// Transactional option).
func Tx(ctx context.Context) (pgx.Tx, bool) {
	tx, ok := ctx.Value(txKey{}).(pgx.Tx)
	return tx, ok
}

func checkHeld(c dedup.Claim) error {
	if c.Key == "" || c.Token == "" {
		return fmt.Errorf("dedup/postgres: claim %q holds no lease (result %v)", c.Key, c.Result)
	}
	return nil
}
