package postgres

import (
	"context"
	"errors"
	"hash/fnv"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// call is one Claim, Complete or Release waiting for its batch; sendBatch
// fills in the answer.
type call struct {
	kind       callKind
	key, token string // key as stored (rowKey)
	lease      int64  // milliseconds; claims only

	acquired, done bool // claims
	held           bool // completions: the claim still held the key
	err            error
	unsent         bool // a claim gaveUp answered without sending it

	// ctx is the caller's: a claim whose caller has stopped waiting is
	// not sent (gaveUp).
	ctx context.Context
}

// gaveUp answers, without sending it, a claim whose caller has stopped
// waiting for it. Sent, it could take a lease that nobody holds, and every
// delivery of its key would be deferred until the lease ran out.
// Completions and releases are sent all the same: their effect is what
// their callers wanted even when they no longer wait for the answer.
func gaveUp(c *call) bool {
	if c.kind != claimCall || c.ctx == nil {
		return false
	}
	if err := c.ctx.Err(); err != nil {
		c.err, c.unsent = err, true
		return true
	}
	return false
}

type callKind uint8

const (
	claimCall callKind = iota
	completeCall
	releaseCall
)

// The batch statements take one array per column, one statement per kind
// of call. sendBatch sends those a batch needs in one round trip, and
// Postgres runs them as one implicit transaction: it commits, and flushes
// its log to disk, once for every call of the batch. The round trip and
// the commit, not the statements, are most of what a claim or a
// completion costs on its own.
func (s *Store) renderBatchSQL(table string) {
	// Before it touches a row, a batch takes a transaction-level advisory
	// lock on every key it names, all in one statement and in one global
	// order (of the keys' hashes). Row locks alone cannot be taken in one
	// order: the completions, releases and claims are three statements,
	// so two replicas' batches that touch the same keys crosswise (one
	// completes k1 and claims k2, the other completes k2 and claims k1 —
	// duplicate deliveries) would each hold a row the other waits for, a
	// deadlock that Postgres breaks only after deadlock_timeout (1s by
	// default) while every call of both replicas waits. With the advisory
	// locks, a batch waits for another only before it holds any row, and
	// never for one that waits for it. The lock class ($2) is the table's,
	// so stores on different tables do not wait for each other; the
	// two-integer form of the lock does not meet the one-bigint form that
	// Migrate and the relay use. Single-key statements take no advisory
	// lock: they hold one row and wait for nothing while they do.
	s.lockManySQL = `SELECT pg_advisory_xact_lock($2::int4, l.h) FROM (
	SELECT DISTINCT hashtext(k) AS h FROM unnest($1::text[]) AS k ORDER BY h OFFSET 0) AS l
ORDER BY l.h`
	// claimSQL for many keys. ON CONFLICT may touch a row only once per
	// statement, so sendBatch sends each key once, in key order.
	s.claimManySQL = `INSERT INTO ` + table + ` AS d (key, token, expires_at)
SELECT c.key, c.token, now() + c.lease * interval '1 millisecond'
FROM unnest($1::text[], $2::text[], $3::bigint[]) AS c(key, token, lease)
ORDER BY c.key
ON CONFLICT (key) DO UPDATE SET
	token      = CASE WHEN d.expires_at <= now() THEN excluded.token      ELSE d.token      END,
	done_at    = CASE WHEN d.expires_at <= now() THEN NULL                ELSE d.done_at    END,
	expires_at = CASE WHEN d.expires_at <= now() THEN excluded.expires_at ELSE d.expires_at END
RETURNING d.key, d.token, d.done_at IS NOT NULL`
	// completeSQL for many keys. ON CONFLICT may touch a row only once per
	// statement: a batch that completes one key twice fails, and its calls
	// are sent again one by one.
	s.completeManySQL = `INSERT INTO ` + table + ` AS d (key, token, done_at, expires_at)
SELECT c.key, c.token, now(), now() + $3 * interval '1 millisecond'
FROM unnest($1::text[], $2::text[]) AS c(key, token)
ORDER BY c.key
ON CONFLICT (key) DO UPDATE SET` + completeSet + `
RETURNING d.key, d.token`
	s.releaseManySQL = `DELETE FROM ` + table + ` AS d
USING unnest($1::text[], $2::text[]) AS c(key, token)
WHERE d.key = c.key AND d.token = c.token AND d.done_at IS NULL`
}

// indexPlansSQL makes the batch's statements look keys up in the primary
// key's index. The completion and the release join the table to arrays of
// keys, and an index lookup per key is the right plan at any size. But a
// planner that costs a table it believes small (a new one is, until
// autovacuum analyzes it) scans it whole and hash-joins the array instead,
// and pgx's statement cache keeps that plan for the connection's life:
// each batch slower than the last as the table grows. The settings rule
// the other plans out for the batch's own transaction and end with it.
const indexPlansSQL = `SELECT set_config('enable_seqscan', 'off', true), set_config('enable_hashjoin', 'off', true), set_config('enable_mergejoin', 'off', true)`

// errMissingRows would mean the claim statement skipped a key; the calls
// are then sent one by one, each of which answers for its own key.
var errMissingRows = errors.New("batched claim returned fewer rows than it had keys")

// sendBatch answers a batch of calls in one round trip and one
// transaction. If anything fails it, every call is sent again on its own
// (sendOneByOne), so that what failed the batch — one key's row, a lost
// connection — fails only the calls it fails alone. The transaction has
// then rolled back, or, when the failure came after the commit (a lost or
// unreadable reply), committed: each kind of call is idempotent, so either
// way the calls sent again are answered right.
func (s *Store) sendBatch(ctx context.Context, calls []*call) {
	calls = slices.DeleteFunc(slices.Clone(calls), gaveUp)
	if len(calls) == 0 {
		return
	}
	var claims, completes, releases columns
	first := make(map[string]*call) // the claim sent for each key
	var repeats []*call             // claims of a key claimed earlier in the batch
	for _, c := range calls {
		switch c.kind {
		case claimCall:
			if _, seen := first[c.key]; seen {
				repeats = append(repeats, c)
				continue
			}
			first[c.key] = c
			claims.add(c)
		case completeCall:
			completes.add(c)
		case releaseCall:
			releases.add(c)
		}
	}

	var b pgx.Batch
	b.Queue(indexPlansSQL)
	b.Queue(s.lockManySQL, batchKeys(calls), s.lockClass)
	type pair struct{ key, token string }
	// Completions go first: a claim of a key completed in the same batch
	// then finds it done.
	held := make(map[pair]bool, len(completes.calls))
	if len(completes.calls) > 0 {
		b.Queue(s.completeManySQL, completes.keys, completes.tokens, s.retention.Milliseconds()).Query(func(rows pgx.Rows) error {
			var p pair
			_, err := pgx.ForEachRow(rows, []any{&p.key, &p.token}, func() error { held[p] = true; return nil })
			return err
		})
	}
	if len(releases.calls) > 0 {
		b.Queue(s.releaseManySQL, releases.keys, releases.tokens)
	}
	type state struct {
		token string
		done  bool
	}
	got := make(map[string]state, len(claims.calls))
	if len(claims.calls) > 0 {
		b.Queue(s.claimManySQL, claims.keys, claims.tokens, claims.leases).Query(func(rows pgx.Rows) error {
			var key string
			var st state
			_, err := pgx.ForEachRow(rows, []any{&key, &st.token, &st.done}, func() error { got[key] = st; return nil })
			if err == nil && len(got) != len(claims.calls) {
				err = errMissingRows
			}
			return err
		})
	}
	if err := s.pool.SendBatch(ctx, &b).Close(); err != nil {
		s.sendOneByOne(ctx, calls, err)
		return
	}
	for _, c := range completes.calls {
		c.held = held[pair{c.key, c.token}]
	}
	for _, c := range claims.calls {
		st := got[c.key]
		c.acquired = st.token == c.token
		c.done = !c.acquired && st.done
	}
	// A repeated claim is answered as it would be right after the first:
	// busy if that one acquired the key, and as it was answered otherwise.
	for _, c := range repeats {
		c.done = first[c.key].done
	}
}

// sendOneByOne answers the calls of a failed batch with a statement each.
// Each kind of call is idempotent, so one sent again after a batch that
// did commit (its reply lost) answers as the batch would have: a claim
// finds the key holding its own token and is acquired, a completion finds
// its own done-mark, a release finds nothing left to delete.
func (s *Store) sendOneByOne(ctx context.Context, calls []*call, batchErr error) {
	if len(calls) == 1 {
		calls[0].err = batchErr
		return
	}
	s.oneByOne.Add(1)
	for _, c := range calls {
		if !gaveUp(c) {
			s.sendOne(ctx, c)
		}
	}
}

// sendOne answers one call with its own statement.
func (s *Store) sendOne(ctx context.Context, c *call) {
	switch c.kind {
	case claimCall:
		c.err = s.pool.QueryRow(ctx, s.claimSQL, c.key, c.token, c.lease).Scan(&c.acquired, &c.done)
		c.done = c.done && !c.acquired
	case completeCall:
		var tag pgconn.CommandTag
		tag, c.err = s.pool.Exec(ctx, s.completeSQL, c.key, c.token, s.retention.Milliseconds())
		c.held = tag.RowsAffected() > 0
	case releaseCall:
		_, c.err = s.pool.Exec(ctx, s.releaseSQL, c.key, c.token)
	}
}

// do answers one call: in the next batch, or, with batching off, at once
// on its own.
func (s *Store) do(ctx context.Context, c *call) error {
	if s.batcher == nil {
		s.sendOne(ctx, c)
		return c.err
	}
	c.ctx = ctx
	if err := s.batcher.Do(ctx, c); err != nil {
		return err
	}
	return c.err
}

// releaseOfAbandoned is coalesce.Undo's undo for the calls whose callers
// stopped waiting: the release of the lease a claim may have taken, one
// that was acquired or that failed after it was sent (its commit may have
// happened, its reply lost). Kept, such a lease would hold every delivery
// of its key off until it ran out, though nobody will complete it. A claim
// delivered to the server only after this release (a connection stalled
// with it unsent) still takes its lease, which then runs out by itself.
func (s *Store) releaseOfAbandoned(c *call) (*call, bool) {
	if c.kind != claimCall || c.unsent || !(c.acquired || c.err != nil) {
		return nil, false
	}
	s.abandonedReleased.Add(1)
	return &call{kind: releaseCall, key: c.key, token: c.token}, true
}

// batchKeys returns the keys the calls name, each once.
func batchKeys(calls []*call) []string {
	keys := make([]string, 0, len(calls))
	seen := make(map[string]bool, len(calls))
	for _, c := range calls {
		if !seen[c.key] {
			seen[c.key] = true
			keys = append(keys, c.key)
		}
	}
	return keys
}

// lockClass is the first key of the batches' advisory locks on table's
// rows: a hash of the table's quoted name.
func lockClass(table string) int32 {
	h := fnv.New32a()
	h.Write([]byte("warren/dedup/postgres " + table))
	return int32(h.Sum32())
}

// columns holds the calls of one kind as the batch statements take them.
type columns struct {
	calls        []*call
	keys, tokens []string
	leases       []int64
}

func (cs *columns) add(c *call) {
	cs.calls = append(cs.calls, c)
	cs.keys = append(cs.keys, c.key)
	cs.tokens = append(cs.tokens, c.token)
	cs.leases = append(cs.leases, c.lease)
}
