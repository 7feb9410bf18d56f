package outbox_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/outbox"
)

// A long transaction that has read Plane's table holds a lock the ALTER
// must wait for; waiting would queue every later read and write of the
// table behind the ALTER. Migrate gives up after LockTimeout instead,
// having changed nothing, and succeeds once the transaction is over.
func TestPlaneMigrateGivesUpOnALockedTable(t *testing.T) {
	ctx := context.Background()
	p := testenv.NewPlaneTable(t, true)
	ob := p.Outbox(outbox.Options{LockTimeout: 200 * time.Millisecond})

	holder, err := p.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(ctx)
	if _, err := holder.Exec(ctx, `SELECT 1 FROM `+p.Name+` LIMIT 1`); err != nil {
		t.Fatal(err)
	}

	// The deadline only bounds the test if Migrate waits on the lock
	// (the bug); it is far beyond LockTimeout.
	mctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	res, err := ob.Migrate(mctx, p.Pool)
	if !errors.Is(err, outbox.ErrLockTimeout) || !strings.Contains(err.Error(), "Nothing was changed") {
		t.Fatalf("Migrate while a transaction holds the table = %+v, %v; want ErrLockTimeout", res, err)
	}
	if res.To != 0 {
		t.Errorf("Migrate reported version %d applied", res.To)
	}
	if ps, err := ob.CheckPlane(ctx, p.Pool); err != nil || ps.Migrated {
		t.Errorf("after the timeout: %+v, %v; want the table unmigrated", ps, err)
	}
	if n := p.Count(`true`); n != 0 {
		t.Fatalf("%d rows", n) // the table is still readable and unchanged
	}

	if err := holder.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if res, err := ob.Migrate(ctx, p.Pool); err != nil || res.To != outbox.PlaneSchemaVersion() {
		t.Fatalf("Migrate after the transaction ended = %+v, %v", res, err)
	}
}

// A concurrent index build that fails leaves an INVALID index behind,
// which CREATE INDEX … IF NOT EXISTS would take for the finished one.
// Migrate drops and rebuilds it, whether the failed build was its own
// (the step not recorded) or a later one (a REINDEX CONCURRENTLY after
// the step was recorded, which CheckPlane reports).
func TestPlaneMigrateRebuildsAnInvalidIndex(t *testing.T) {
	ctx := context.Background()
	p := testenv.NewPlaneTable(t, true)
	ob := p.Outbox(outbox.Options{})
	p.Insert(2)
	claimIdx := p.Name + "_warren_claim_idx"
	// A unique build over two equal workspace_ids fails, leaving the name
	// taken by an invalid index.
	failBuild := func() {
		t.Helper()
		_, err := p.Pool.Exec(ctx, `CREATE UNIQUE INDEX CONCURRENTLY `+claimIdx+` ON `+p.Name+` (workspace_id)`)
		if err == nil || !strings.Contains(err.Error(), "23505") { // unique_violation
			t.Fatalf("the failing build: %v", err)
		}
		if valid(t, p, claimIdx) {
			t.Fatal("the failed build left a valid index")
		}
	}
	failBuild()
	if res, err := ob.Migrate(ctx, p.Pool); err != nil || res.To != outbox.PlaneSchemaVersion() {
		t.Fatalf("Migrate = %+v, %v", res, err)
	}
	checkClaimIndex(t, p, claimIdx)

	p.Exec(`DROP INDEX {table_warren_claim_idx}`)
	failBuild()
	if _, err := ob.CheckPlane(ctx, p.Pool); !errors.Is(err, outbox.ErrSchema) || !strings.Contains(err.Error(), "is invalid") {
		t.Fatalf("CheckPlane with an invalid index: %v", err)
	}
	if res, err := ob.Migrate(ctx, p.Pool); err != nil || res.From != res.To {
		t.Fatalf("second Migrate = %+v, %v", res, err)
	}
	checkClaimIndex(t, p, claimIdx)
	if ps, err := ob.CheckPlane(ctx, p.Pool); err != nil || !ps.Migrated {
		t.Fatalf("CheckPlane after the rebuild: %+v, %v", ps, err)
	}

	p.Exec(`DROP INDEX {table_warren_lapsed_idx}`)
	if _, err := ob.CheckPlane(ctx, p.Pool); !errors.Is(err, outbox.ErrSchema) || !strings.Contains(err.Error(), "is missing") {
		t.Fatalf("CheckPlane with a dropped index: %v", err)
	}
}

func valid(t *testing.T, p *testenv.PlaneTable, index string) bool {
	t.Helper()
	var ok bool
	if err := p.Pool.QueryRow(context.Background(), `SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass($1)`, index).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}

// checkClaimIndex: the index is valid and the migration's, not the
// failed build's.
func checkClaimIndex(t *testing.T, p *testenv.PlaneTable, index string) {
	t.Helper()
	if !valid(t, p, index) {
		t.Fatal("the index is still invalid")
	}
	var def string
	if err := p.Pool.QueryRow(context.Background(), `SELECT pg_get_indexdef(to_regclass($1))`, index).Scan(&def); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(def, "UNIQUE") || !strings.Contains(def, "(id) WHERE ((claimed_at IS NULL) AND (processed_at IS NULL))") {
		t.Errorf("the index is %s", def)
	}
}
