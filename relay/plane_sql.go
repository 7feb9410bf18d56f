package relay

import (
	"fmt"
	"strings"

	"github.com/warrenmq/warren/internal/outboxsql"
	"github.com/warrenmq/warren/outbox"
)

// On a Plane outbox table (outbox.SchemaPlane) the claim is claimed_at:
// set to now() by a claim, and a claim older than the lease has lapsed.
// Settling sets processed_at, as Plane's poller does, so Plane's cleaner
// keeps trimming the table; no row is deleted. Every settle is fenced on
// the claim's token (outboxsql.PlaneClaimToken: its claimed_at in
// microseconds), which the claim returned as the row's Claims: a relay
// whose lease lapsed and whose rows were claimed again (by a relay, or
// released and taken by Plane's poller) matches nothing. Lease and
// MaxAttempts are rendered into the statements as literals: they are the
// relay's own numbers, fixed for its life.
//
// The statements come in two variants. Without warren's optional columns
// (outbox migration for Plane) a row has no attempts and cannot be dead:
// a failed row waits out its retry delay as a claim that lapses when the
// delay ends (claimed_at = now() - lease + delay), which also keeps
// Plane's poller off it. With them, claims count warren_attempts, a
// failure records warren_last_error, and a row out of attempts, or one
// that cannot be published, gets warren_dead_at (its claimed_at stays
// set, so Plane's poller never takes it).

// planeClaimSQL takes, first, lapsed claims (the {lapsed} CTE: Plane's
// crashed poller's stranded rows, a dead relay's, retries falling due),
// then unclaimed rows in id order, both with SKIP LOCKED so concurrent
// relays (and Plane's poller, whose claim is the same) take disjoint
// rows. A lapsed claim whose attempts are spent is made dead instead.
// Plane's partial index outbox_unclaimed_unprocessed holds the unclaimed
// rows but cannot hand them over in id order (its leading columns are
// matched by IS NULL), so without warren's migration the planner walks the
// primary key past every processed row, or sorts every unclaimed one; the
// migration's claim index (id) WHERE unclaimed and unprocessed gives the
// first batch directly.
const planeClaimSQL = `
WITH lapsed AS ({lapsed}),
fresh AS (
	SELECT c.id AS picked_id, false AS exhausted, false AS lapsed
	FROM {table} AS c
	WHERE c.claimed_at IS NULL AND c.processed_at IS NULL
	ORDER BY c.id
	LIMIT greatest($1 - (SELECT count(*) FROM lapsed), 0)
	FOR UPDATE SKIP LOCKED
),
picked AS (SELECT * FROM lapsed UNION ALL SELECT * FROM fresh)
UPDATE {table} AS o SET
	claimed_at = CASE WHEN p.exhausted THEN o.claimed_at ELSE now() END{claim_set}
FROM picked AS p
WHERE o.id = p.picked_id
RETURNING p.exhausted, p.lapsed, {columns}`

// planeLapsedSQL finds lapsed claims. Without the migration nothing
// indexes claimed rows, so it scans the table, and runs every Lease/2;
// with it, warren's lapsed-claim index makes it cheap enough for every
// claim. It never takes a dead row (the {live} condition).
const planeLapsedSQL = `
	SELECT c.id AS picked_id, {exhausted} AS exhausted, true AS lapsed
	FROM {table} AS c
	WHERE c.processed_at IS NULL AND c.claimed_at < now() - {lease}{live}
	ORDER BY c.claimed_at, c.id
	LIMIT $1
	FOR UPDATE SKIP LOCKED`

// planeNoLapsedSQL is the {lapsed} CTE of the claim that takes only
// unclaimed rows.
const planeNoLapsedSQL = `SELECT NULL::bigint AS picked_id, false AS exhausted, false AS lapsed WHERE false`

const planeClaimSetMigrated = `,
	warren_attempts   = CASE WHEN p.exhausted THEN o.warren_attempts ELSE o.warren_attempts + 1 END,
	warren_dead_at    = CASE WHEN p.exhausted THEN now() END,
	warren_last_error = CASE WHEN p.exhausted
		THEN format('gave up after %s attempts: the lease of the last one lapsed before its relay settled it (last error: %s)',
			o.warren_attempts, coalesce(o.warren_last_error, 'none'))
		ELSE o.warren_last_error END`

// planeFence matches the rows of a batch that the claim which returned
// them still holds: the same claimed_at, and still unprocessed (Plane's
// poller marks processed_at without a fence) and, with the migration, not
// dead. A settle sent twice changes nothing the second time: it moved
// claimed_at or set processed_at the first time.
const planeFence = `o.id = s.id AND {fence_token} = s.claims AND o.processed_at IS NULL{live_o}`

// planeSettleSQL marks confirmed rows processed. It runs only after the
// broker's confirm: the confirm is the durable copy that makes the row
// done, and processed_at is what Plane's cleaner deletes by.
const planeSettleSQL = `
UPDATE {table} AS o SET processed_at = now()
FROM unnest($1::bigint[], $2::bigint[]) AS s(id, claims)
WHERE ` + planeFence

// planeFailureSQL (without the migration) puts a failed row back as a
// claim that lapses when its retry delay ends. $3 the delays in seconds.
const planeFailureSQL = `
UPDATE {table} AS o SET claimed_at = now() - {lease} + make_interval(secs => s.delay)
FROM unnest($1::bigint[], $2::bigint[], $3::float8[]) AS s(id, claims, delay)
WHERE ` + planeFence + `
RETURNING o.id, o.event_id::text, 'pending', 0`

// planeFailureMigratedSQL records the error and makes the row dead when
// its attempts are spent or it cannot be published; otherwise it waits
// out its delay as planeFailureSQL does.
const planeFailureMigratedSQL = `
UPDATE {table} AS o SET
	warren_dead_at    = CASE WHEN s.permanent OR o.warren_attempts >= {max_attempts} THEN now() END,
	claimed_at        = CASE WHEN s.permanent OR o.warren_attempts >= {max_attempts} THEN o.claimed_at
		ELSE now() - {lease} + make_interval(secs => s.delay) END,
	warren_last_error = s.error
FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::float8[], $5::bool[])
	AS s(id, claims, error, delay, permanent)
WHERE ` + planeFence + `
RETURNING o.id, o.event_id::text, CASE WHEN o.warren_dead_at IS NULL THEN 'pending' ELSE 'dead' END, o.warren_attempts`

// planeReleaseSQL unclaims rows, so that the next relay, or Plane's
// poller during a cut-over, takes them at once; with the migration it
// gives back the attempt the claim spent.
const planeReleaseSQL = `
WITH released AS (
	UPDATE {table} AS o SET claimed_at = NULL{release_set}
	FROM unnest($1::bigint[], $2::bigint[]) AS s(id, claims)
	WHERE ` + planeFence + `
	RETURNING 1
)
SELECT count(*) FROM (SELECT pg_notify($3, '') FROM released) AS notified`

// renderPlaneStatements renders the relay's statements for a Plane table,
// with or without warren's optional columns.
func renderPlaneStatements(ob *outbox.Table, maxAttempts int, migrated bool) statements {
	v := map[string]string{
		"lease":        fmt.Sprintf("interval '%d microseconds'", ob.Lease().Microseconds()),
		"max_attempts": fmt.Sprint(maxAttempts),
		"fence_token":  outboxsql.PlaneClaimToken("o.claimed_at"),
		"columns":      outboxsql.RowColumns(ob, migrated),
		"exhausted":    "false",
		"live":         "",
		"live_o":       "",
		"claim_set":    "",
		"release_set":  "",
	}
	failure := planeFailureSQL
	if migrated {
		v["exhausted"] = fmt.Sprintf("c.warren_attempts >= %d", maxAttempts)
		v["live"] = " AND c.warren_dead_at IS NULL"
		v["live_o"] = " AND o.warren_dead_at IS NULL"
		v["claim_set"] = planeClaimSetMigrated
		v["release_set"] = ", warren_attempts = greatest(o.warren_attempts - 1, 0)"
		failure = planeFailureMigratedSQL
	}
	r := func(q string) string {
		for range 2 { // placeholders inside placeholders ({lapsed} holds {lease})
			for k, x := range v {
				q = strings.ReplaceAll(q, "{"+k+"}", x)
			}
		}
		return renderTable(ob.Name(), q)
	}
	v["lapsed"] = planeLapsedSQL
	withTakeover := r(planeClaimSQL)
	v["lapsed"] = planeNoLapsedSQL
	s := statements{
		claim:         r(planeClaimSQL),
		claimTakeover: withTakeover,
		takeoverEvery: ob.Lease() / 2,
		settleDelete:  r(planeSettleSQL),
		settleKeep:    r(planeSettleSQL),
		settleFailure: r(failure),
		release:       r(planeReleaseSQL),
		plane:         true,
		canDie:        migrated,
	}
	if migrated {
		s.takeoverEvery = 0 // the index makes it cheap
	}
	return s
}
