package outbox

import (
	"fmt"

	"github.com/warrenmq/warren/internal/outboxsql"
)

// statements are the queries that producers and operators run on one
// outbox table, rendered once with its quoted name. The relay's claim and
// settle statements live in package relay.
type statements struct {
	insert        string
	stats         string
	dead          string
	redrive       string
	purgeSelect   string
	purgeCount    string
	purgeDelete   string
	schemaVersion string

	captureErrorsExist, captureErrors string
}

// The insert takes one array per column so a batch is one statement. The
// NOTIFY rides in the caller's transaction, so it is delivered when (and
// only if) the rows commit; the notify expression (%s: notifyAlways or
// notifyWhenIdle) runs once per inserted row and Postgres folds identical
// notifications of one transaction into one. The trace context ($14, $15)
// is the caller's, the same for the whole batch.
const insertSQL = `
WITH inserted AS (
	INSERT INTO {table} (event_id, event_type, entity_type, entity_id, workspace_id, project_id,
		initiator_id, initiator_type, payload, version, extra, created_at, traceparent, tracestate)
	SELECT e.event_id, e.event_type, e.entity_type, e.entity_id, e.workspace_id, e.project_id,
		e.initiator_id, e.initiator_type, e.payload::jsonb, e.version, e.extra::jsonb,
		coalesce(e.created_at, now()), $14::text, $15::text
	FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[],
			$7::text[], $8::text[], $9::text[], $10::text[], $11::text[], $12::timestamptz[])
		WITH ORDINALITY AS e(event_id, event_type, entity_type, entity_id, workspace_id, project_id,
			initiator_id, initiator_type, payload, version, extra, created_at, n)
	ORDER BY e.n
	ON CONFLICT (event_id) DO NOTHING
	RETURNING 1
)
SELECT count(*) FROM (SELECT %s FROM inserted) AS notified`

const notifyAlways = `pg_notify($13, '')`

// notifyWhenIdle notifies only when no other row is due and unclaimed in
// this statement's snapshot (a claimed row's available_at is its lease's
// end, in the future). The uncorrelated EXISTS runs once per statement, on
// the claim index; the CASE keeps pg_notify volatile, so the count(*)
// above still runs it. See Options.NotifyWhenIdle for why it is safe.
// Only under READ COMMITTED is the snapshot this statement's own: under
// REPEATABLE READ or SERIALIZABLE it is the transaction's first, which
// may show a row the relay has long since published, so those always
// notify.
const notifyWhenIdle = `CASE WHEN current_setting('transaction_isolation') <> 'read committed' OR NOT EXISTS (
		SELECT 1 FROM {table} WHERE state = 'pending' AND available_at <= now()
	) THEN pg_notify($13, '') END`

// statsSQL reads the pending rows once: the counts of claimed rows and
// the oldest row need columns the claim index does not hold, so each of
// them was a scan of the table of its own (four scans of a 1M-row backlog,
// 530 ms; one, 215 ms). The finished rows are counted on their index.
const statsSQL = `
SELECT p.pending, p.in_flight, p.retrying, p.lapsed,
	(SELECT count(*) FROM {table} WHERE state = 'dead'),
	(SELECT count(*) FROM {table} WHERE state = 'delivered'),
	p.oldest
FROM (SELECT count(*) AS pending,
		count(*) FILTER (WHERE claimed_by IS NOT NULL AND available_at > now()) AS in_flight,
		count(*) FILTER (WHERE claimed_by IS NULL AND available_at > now()) AS retrying,
		count(*) FILTER (WHERE claimed_by IS NOT NULL AND available_at <= now()) AS lapsed,
		coalesce(extract(epoch FROM now() - min(inserted_at)), 0)::float8 AS oldest
	FROM {table} WHERE state = 'pending') AS p`

// deadFilter is the WHERE clause of Filter; $1 type prefix, $2 entity id,
// $3 event ids, $4 limit (NULL for none).
const deadFilter = `state = 'dead'
	AND ($1 = '' OR starts_with(event_type, $1))
	AND ($2 = '' OR entity_id = $2)
	AND (cardinality($3::text[]) = 0 OR event_id = ANY($3::text[]))
	AND (cardinality($5::bigint[]) = 0 OR id = ANY($5::bigint[]))`

const deadSQL = `SELECT ` + outboxsql.Columns + ` FROM {table} WHERE ` + deadFilter + ` ORDER BY id LIMIT $4`

const redriveSQL = `
WITH redriven AS (
	UPDATE {table} SET state = 'pending', attempts = 0, available_at = now(), finished_at = NULL, claimed_by = NULL
	WHERE id IN (SELECT id FROM {table} WHERE ` + deadFilter + ` ORDER BY id LIMIT $4 FOR UPDATE)
	RETURNING 1
)
SELECT count(*) FROM (SELECT pg_notify($6, '') FROM redriven) AS notified`

// The purge locks its batch so that a concurrent Redrive cannot turn a row
// back to pending between the archive and the delete. $1 never holds
// 'pending' (Purge refuses it); saying so lets a generic plan use the
// finished index, whose predicate is state <> 'pending', where it would
// otherwise read the whole table for every batch
// (TestPurgeSelectUsesTheFinishedIndex).
const purgeSelectSQL = `
SELECT ` + outboxsql.Columns + ` FROM {table}
WHERE state = ANY($1::text[]) AND state <> 'pending' AND finished_at < $2
LIMIT $3
FOR UPDATE SKIP LOCKED`

// purgeCountSQL counts what purgeSelectSQL's batches would take, on the
// same index.
const purgeCountSQL = `SELECT count(*) FROM {table} WHERE state = ANY($1::text[]) AND state <> 'pending' AND finished_at < $2`

const purgeDeleteSQL = `DELETE FROM {table} WHERE id = ANY($1::bigint[])`

// The capture errors table is made by package outbox/capture, and only
// for its Record policy.
const (
	captureErrorsExistSQL = `SELECT to_regclass($1) IS NOT NULL`
	captureErrorsSQL      = `SELECT count(*) FROM {table_capture_errors}`
)

const schemaVersionSQL = `SELECT coalesce(max(version), 0) FROM {table_migrations}`

// notifyNever stands where the notify expression would: the count still
// needs a column, and $13 stays in the statement for the arguments' sake.
const notifyNever = `CASE WHEN $13::text IS NULL THEN NULL END`

// notifyMode is the notify expression Options ask for.
func notifyMode(opts Options) string {
	switch opts.Notify {
	case NotifyNever:
		return notifyNever
	case NotifyEveryCommit:
		return notifyAlways
	}
	return notifyWhenIdle
}

func renderStatements(table, notify string) statements {
	r := func(q string) string { return render(table, q) }
	return statements{
		insert:        r(fmt.Sprintf(insertSQL, notify)),
		stats:         r(statsSQL),
		dead:          r(deadSQL),
		redrive:       r(redriveSQL),
		purgeSelect:   r(purgeSelectSQL),
		purgeCount:    r(purgeCountSQL),
		purgeDelete:   r(purgeDeleteSQL),
		schemaVersion: r(schemaVersionSQL),

		captureErrorsExist: captureErrorsExistSQL,
		captureErrors:      r(captureErrorsSQL),
	}
}
