package relay

import (
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/warrenmq/warren/internal/outboxsql"
)

// statements are the relay's queries on one outbox table, rendered once
// with its quoted name: the claim, and the settles that end a claim. The
// statements producers and operators run live in package outbox. Every
// statement that settles a claimed row is fenced on (id, claims): claims
// grows by one with every claim and is never reset, so a relay whose lease
// lapsed and whose row was claimed again cannot overwrite what the newer
// claimant decides.
type statements struct {
	claim         string
	claimOrdered  string
	settleDelete  string
	settleKeep    string
	settleFailure string
	release       string

	// claimTakeover, on a Plane table, is the claim that also takes over
	// lapsed claims; it replaces claim at most every takeoverEvery (every
	// time when 0).
	claimTakeover string
	takeoverEvery time.Duration
	plane         bool // the statements of a Plane table (see plane_sql.go)
	canDie        bool // a failure can make a row dead
}

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
RETURNING p.exhausted, ` + outboxsql.Columns

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

func renderTable(table, q string) string {
	return strings.ReplaceAll(q, "{table}", pgx.Identifier{table}.Sanitize())
}

func renderStatements(table string) statements {
	r := func(q string) string { return renderTable(table, q) }
	return statements{
		canDie:        true,
		claim:         r(fmt.Sprintf(claimSQL, "")),
		claimOrdered:  r(fmt.Sprintf(claimSQL, entityOrderClause)),
		settleDelete:  r(settleDeleteSQL),
		settleKeep:    r(settleKeepSQL),
		settleFailure: r(settleFailureSQL),
		release:       r(releaseSQL),
	}
}
