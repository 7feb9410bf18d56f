package relay_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/relay"
)

// Without warren's index the search for lapsed claims runs every Lease/2,
// in the statement that also claims new rows. When it fails, the next
// claim searches again instead of waiting another interval, and the log
// says what failed and what cures it; when it fails again, new rows are
// claimed without it meanwhile rather than not at all.
func TestPlaneFailedTakeoverIsRetriedAndExplained(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newPlaneEnv(t, true, false)
	var log lineLog
	cfg := e.config(testenv.Name(t, "relay"))
	cfg.Logger = log.logger()
	r, err := relay.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	relay.SetPlaneTakeoverClaim(r, `SELECT 1/0`) // as a scan that outlasts the claim's timeout fails
	ids := e.plane.Insert(1)

	const explained = "the search for lapsed claims failed"
	for attempt := 1; attempt <= 2; attempt++ {
		if rows, err := relay.ClaimBatch(ctx, r, e.pool); err == nil {
			t.Fatalf("claim %d took %d rows without searching for lapsed claims; want the search retried (and failing again)", attempt, len(rows))
		}
		if n := log.count(explained); n != attempt {
			t.Fatalf("after %d failed searches, %d lines say so", attempt, n)
		}
	}
	if log.count("warren outbox migrate --schema plane") != 2 {
		t.Error("the failures do not say how to get the index")
	}
	rows, err := relay.ClaimBatch(ctx, r, e.pool)
	if err != nil || len(rows) != 1 || rows[0].Event.ID != ids[0] {
		t.Fatalf("the claim after two failed searches = %d rows, %v; want the new row, claimed without the search", len(rows), err)
	}
}

// A relay started before warren's migration notices it at its next search
// for lapsed claims and switches to the statements that know dead rows:
// a dead row keeps its claimed_at, so the statements without the columns
// would take it for a lapsed claim and publish it again.
func TestPlaneRelayNoticesTheMigration(t *testing.T) {
	t.Parallel()
	e := newPlaneEnv(t, true, false)
	got := consume(t, e.queue)
	cfg := e.config(testenv.Name(t, "relay"))
	// A short lease: without the migration the relay searches for lapsed
	// claims every Lease/2. One worker: its cycles, and so its checks of
	// the migration, come one after another.
	cfg.Lease, cfg.PublishTimeout, cfg.Workers = 2*time.Second, time.Second, 1
	e.start(cfg)
	first := e.plane.Insert(1)
	e.requireAllProcessed(got, first, 60*time.Second) // running, unmigrated

	if _, err := e.outbox.Migrate(context.Background(), e.pool); err != nil {
		t.Fatal(err)
	}
	// A stranded claim made after the migration: once it is published, a
	// takeover has run whose check came after the migration.
	a := e.insertClaimed(`now() - interval '1 day'`, false)
	e.requireAllProcessed(got, append(first, a...), 60*time.Second)

	// A dead row, older than a stranded claim: the takeover of the one
	// would come to the other first.
	dead := e.insertClaimed(`now() - interval '2 days'`, true)
	b := e.insertClaimed(`now() - interval '1 day'`, false)
	// The settle of b's batch comes after every publish of that batch.
	testenv.WaitFor(t, 60*time.Second, "the stranded claim published and processed", func() bool {
		return got.has(b[0]) && e.count(`event_id = $1::uuid AND processed_at IS NOT NULL`, b[0]) == 1
	})
	if got.has(dead[0]) {
		t.Error("the relay published a dead row")
	}
	if n := e.count(`event_id = $1::uuid AND warren_dead_at IS NOT NULL AND processed_at IS NULL`, dead[0]); n != 1 {
		t.Error("the dead row is no longer dead")
	}
}

// insertClaimed writes a row whose claim was made at claimedAt (SQL), dead
// or not, in one statement: a row inserted unclaimed could be claimed as
// a new one before an UPDATE made it what the test needs.
func (e *planeEnv) insertClaimed(claimedAt string, dead bool) []string {
	e.t.Helper()
	deadAt, attempts := "NULL", 0
	if dead {
		deadAt, attempts = "now()", 5
	}
	var id string
	err := e.pool.QueryRow(context.Background(), fmt.Sprintf(`
		INSERT INTO %q (event_id, event_type, entity_type, entity_id, payload, workspace_id, claimed_at, warren_dead_at, warren_attempts)
		VALUES (gen_random_uuid(), 'workitem.updated', 'issue', gen_random_uuid(), '{"data": {}}', gen_random_uuid(), %s, %s, %d)
		RETURNING event_id::text`, e.table, claimedAt, deadAt, attempts)).Scan(&id)
	if err != nil {
		e.t.Fatal(err)
	}
	return []string{id}
}
