package relay

import "fmt"

// statements are the queries of one outbox table, rendered once with its
// quoted name. Every statement that settles a claimed row is fenced on
// (id, claims): claims grows by one with every claim and is never reset,
// so a relay whose lease lapsed and whose row was claimed again cannot
// overwrite what the newer claimant decides.
type statements struct {
	insert        string
	claim         string
	claimOrdered  string
	settleDelete  string
	settleKeep    string
	settleFailure string
	release       string
	stats         string
	dead          string
	redrive       string
	purgeSelect   string
	purgeDelete   string
	schemaVersion string
}

// rowColumns are the columns scanRow reads, in its order.
const rowColumns = `id, event_id, event_type, entity_type, entity_id, workspace_id, project_id,
	initiator_id, initiator_type, payload, version, extra, created_at, inserted_at, state,
	available_at, attempts, claims, claimed_by, last_error, finished_at, traceparent, tracestate`

// The insert takes one array per column so a batch is one statement. The
// NOTIFY rides in the caller's transaction, so it is delivered when (and
// only if) the rows commit; pg_notify runs once per inserted row and
// Postgres folds identical notifications of one transaction into one. The
// trace context ($14, $15) is the caller's, the same for the whole batch.
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
SELECT count(*) FROM (SELECT pg_notify($13, '') FROM inserted) AS notified`

// The claim locks due rows with SKIP LOCKED inside a LIMITed CTE, so
// concurrent relays take disjoint batches and each row is locked once, and
// commits at once: the lease in available_at, not the row lock, keeps the
// row from other relays while this one publishes. attempts grows at claim,
// so a relay that dies mid-publish still spends an attempt; a row whose
// attempts are already spent (its last lease lapsed) is made dead here
// instead of being published again.
const claimSQL = `
WITH picked AS (
	SELECT c.id AS picked_id, c.attempts >= $3 AS exhausted
	FROM {table} AS c
	WHERE c.state = 'pending' AND c.available_at <= now() %s
	ORDER BY c.available_at, c.id
	LIMIT $1
	FOR UPDATE SKIP LOCKED
)
UPDATE {table} AS o SET
	attempts     = CASE WHEN p.exhausted THEN o.attempts ELSE o.attempts + 1 END,
	claims       = o.claims + 1,
	claimed_by   = CASE WHEN p.exhausted THEN NULL ELSE $4 END,
	available_at = CASE WHEN p.exhausted THEN o.available_at ELSE now() + make_interval(secs => $2) END,
	state        = CASE WHEN p.exhausted THEN 'dead' ELSE 'pending' END,
	finished_at  = CASE WHEN p.exhausted THEN now() END,
	last_error   = CASE WHEN p.exhausted
		THEN format('gave up after %%s attempts: the lease of the last one lapsed before its relay settled it (last error: %%s)',
			o.attempts, coalesce(o.last_error, 'none'))
		ELSE o.last_error END
FROM picked AS p
WHERE o.id = p.picked_id
RETURNING p.exhausted, ` + rowColumns

// entityOrderClause makes only the oldest pending row of an entity
// claimable. A claimed (leased) row is still pending, so the entity's next
// row waits until it is delivered or dead. The redundant test of
// older.entity_id lets the planner use the partial entity index.
const entityOrderClause = `
	AND (c.entity_id = '' OR NOT EXISTS (
		SELECT 1 FROM {table} AS older
		WHERE older.state = 'pending' AND older.entity_id <> '' AND older.entity_type = c.entity_type
			AND older.entity_id = c.entity_id AND older.id < c.id))`

// fenceMatch selects the rows of a batch that the claim which returned
// them still holds. claimed_by IS NOT NULL makes a settle that is sent
// twice (a retry after a lost reply) change nothing the second time.
const fenceMatch = `o.id = s.id AND o.claims = s.claims AND o.state = 'pending' AND o.claimed_by IS NOT NULL`

const settleFence = `
FROM unnest($1::bigint[], $2::bigint[]) AS s(id, claims)
WHERE ` + fenceMatch

const settleDeleteSQL = `
DELETE FROM {table} AS o
USING unnest($1::bigint[], $2::bigint[]) AS s(id, claims)
WHERE ` + fenceMatch

const settleKeepSQL = `
UPDATE {table} AS o SET state = 'delivered', finished_at = now(), claimed_by = NULL` + settleFence

const settleFailureSQL = `
UPDATE {table} AS o SET
	state        = CASE WHEN s.permanent OR o.attempts >= $6 THEN 'dead' ELSE 'pending' END,
	finished_at  = CASE WHEN s.permanent OR o.attempts >= $6 THEN now() END,
	available_at = now() + make_interval(secs => s.delay),
	claimed_by   = NULL,
	last_error   = s.error
FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::float8[], $5::bool[])
	AS s(id, claims, error, delay, permanent)
WHERE ` + fenceMatch + `
RETURNING o.id, o.event_id, o.state, o.attempts`

// A release gives back the attempt its claim spent: the relay is stopping,
// the row did nothing wrong. The fence makes that safe — only the claim
// that spent the attempt can give it back.
const releaseSQL = `
WITH released AS (
	UPDATE {table} AS o SET attempts = greatest(o.attempts - 1, 0), available_at = now(), claimed_by = NULL` +
	settleFence + `
	RETURNING 1
)
SELECT count(*) FROM (SELECT pg_notify($3, '') FROM released) AS notified`

const statsSQL = `
SELECT
	(SELECT count(*) FROM {table} WHERE state = 'pending'),
	(SELECT count(*) FROM {table} WHERE state = 'pending' AND claimed_by IS NOT NULL AND available_at > now()),
	(SELECT count(*) FROM {table} WHERE state = 'pending' AND claimed_by IS NULL AND available_at > now()),
	(SELECT count(*) FROM {table} WHERE state = 'dead'),
	(SELECT count(*) FROM {table} WHERE state = 'delivered'),
	(SELECT coalesce(extract(epoch FROM now() - min(inserted_at)), 0)::float8 FROM {table} WHERE state = 'pending')`

// deadFilter is the WHERE clause of Filter; $1 type prefix, $2 entity id,
// $3 event ids, $4 limit (NULL for none).
const deadFilter = `state = 'dead'
	AND ($1 = '' OR starts_with(event_type, $1))
	AND ($2 = '' OR entity_id = $2)
	AND (cardinality($3::text[]) = 0 OR event_id = ANY($3::text[]))`

const deadSQL = `SELECT ` + rowColumns + ` FROM {table} WHERE ` + deadFilter + ` ORDER BY id LIMIT $4`

const redriveSQL = `
WITH redriven AS (
	UPDATE {table} SET state = 'pending', attempts = 0, available_at = now(), finished_at = NULL, claimed_by = NULL
	WHERE id IN (SELECT id FROM {table} WHERE ` + deadFilter + ` ORDER BY id LIMIT $4 FOR UPDATE)
	RETURNING 1
)
SELECT count(*) FROM (SELECT pg_notify($5, '') FROM redriven) AS notified`

// The purge locks its batch so that a concurrent Redrive cannot turn a row
// back to pending between the archive and the delete.
const purgeSelectSQL = `
SELECT ` + rowColumns + ` FROM {table}
WHERE state = ANY($1::text[]) AND finished_at < $2
LIMIT $3
FOR UPDATE SKIP LOCKED`

const purgeDeleteSQL = `DELETE FROM {table} WHERE id = ANY($1::bigint[])`

const schemaVersionSQL = `SELECT coalesce(max(version), 0) FROM {table_migrations}`

func renderStatements(table string) statements {
	r := func(q string) string { return render(table, q) }
	return statements{
		insert:        r(insertSQL),
		claim:         r(fmt.Sprintf(claimSQL, "")),
		claimOrdered:  r(fmt.Sprintf(claimSQL, entityOrderClause)),
		settleDelete:  r(settleDeleteSQL),
		settleKeep:    r(settleKeepSQL),
		settleFailure: r(settleFailureSQL),
		release:       r(releaseSQL),
		stats:         r(statsSQL),
		dead:          r(deadSQL),
		redrive:       r(redriveSQL),
		purgeSelect:   r(purgeSelectSQL),
		purgeDelete:   r(purgeDeleteSQL),
		schemaVersion: r(schemaVersionSQL),
	}
}
