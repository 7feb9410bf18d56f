package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/outbox"
)

func execSQL(t *testing.T, sql string) {
	t.Helper()
	if _, err := testenv.PgPool(t).Exec(context.Background(), sql); err != nil {
		t.Fatal(err)
	}
}

// migratedTable returns a table migrated to the latest version.
func migratedTable(t *testing.T) (string, *outbox.Table) {
	t.Helper()
	table, ob := unmigratedTable(t)
	if _, err := ob.Migrate(context.Background(), testenv.PgPool(t)); err != nil {
		t.Fatal(err)
	}
	return table, ob
}

// wantSchemaErr fails unless err wraps ErrSchema and names want.
func wantSchemaErr(t *testing.T, what string, err error, want string) {
	t.Helper()
	if !errors.Is(err, outbox.ErrSchema) || !strings.Contains(err.Error(), want) {
		t.Fatalf("%s: %v; want an ErrSchema naming %q", what, err, want)
	}
}

// CheckSchema, the relay's start, refuses a table dropped since it was
// migrated: its record alone would pass, and the relay would deliver
// nothing.
func TestCheckSchemaRefusesADroppedTable(t *testing.T) {
	table, ob := migratedTable(t)
	execSQL(t, fmt.Sprintf(`DROP TABLE %q`, table))
	wantSchemaErr(t, "CheckSchema of a dropped table", ob.CheckSchema(context.Background(), testenv.PgPool(t)), "does not exist")
}

// Migrate and CheckSchema refuse a table without a column its steps
// added: Publish would fail on it.
func TestMigrateAndCheckSchemaRefuseADroppedColumn(t *testing.T) {
	ctx := context.Background()
	pool := testenv.PgPool(t)
	table, ob := migratedTable(t)
	execSQL(t, fmt.Sprintf(`ALTER TABLE %q DROP COLUMN traceparent`, table))
	_, err := ob.Migrate(ctx, pool)
	wantSchemaErr(t, "Migrate without traceparent", err, "column traceparent text")
	wantSchemaErr(t, "CheckSchema without traceparent", ob.CheckSchema(ctx, pool), "column traceparent text")
}

// A column of the right name but another type or nullability is not the
// column the steps made.
func TestMigrateRefusesAChangedColumn(t *testing.T) {
	table, ob := migratedTable(t)
	execSQL(t, fmt.Sprintf(`ALTER TABLE %q ALTER COLUMN event_type DROP NOT NULL`, table))
	_, err := ob.Migrate(context.Background(), testenv.PgPool(t))
	wantSchemaErr(t, "Migrate with event_type nullable", err, "column event_type text NOT NULL")
}

// The unique constraint on event_id dropped and a plain index given its
// name: the name is there, event_id is no longer unique. Both refuse it.
func TestMigrateAndCheckSchemaRefuseASameNamedNonUniqueIndex(t *testing.T) {
	ctx := context.Background()
	pool := testenv.PgPool(t)
	table, ob := migratedTable(t)
	execSQL(t, fmt.Sprintf(`ALTER TABLE %q DROP CONSTRAINT %q`, table, table+"_event_id_key"))
	execSQL(t, fmt.Sprintf(`CREATE INDEX %q ON %q (event_id)`, table+"_event_id_key", table))
	_, err := ob.Migrate(ctx, pool)
	wantSchemaErr(t, "Migrate with a non-unique event_id index", err, "UNIQUE (event_id)")
	wantSchemaErr(t, "CheckSchema with a non-unique event_id index", ob.CheckSchema(ctx, pool), "UNIQUE (event_id)")
}

// What an operator adds beside the steps' objects, and a NOT VALID check
// validated since, are not differences: the table stays accepted.
func TestMigrateAcceptsAdditionsAndValidatedChecks(t *testing.T) {
	ctx := context.Background()
	pool := testenv.PgPool(t)
	table, ob := migratedTable(t)
	execSQL(t, fmt.Sprintf(`ALTER TABLE %q ADD COLUMN note text`, table))
	execSQL(t, fmt.Sprintf(`CREATE INDEX %q ON %q (created_at)`, table+"_mine", table))
	execSQL(t, fmt.Sprintf(`ALTER TABLE %q VALIDATE CONSTRAINT %q`, table, table+"_created_at_check"))
	if res, err := ob.Migrate(ctx, pool); err != nil || res.From != outbox.SchemaVersion() {
		t.Fatalf("Migrate of a table with additions: %+v, %v", res, err)
	}
	if err := ob.CheckSchema(ctx, pool); err != nil {
		t.Fatalf("CheckSchema of a table with additions: %v", err)
	}
}

// The migrations record dropped, the table kept with its rows: the table
// has everything the steps make, so Migrate records them again and runs
// none (step 1's CREATE TABLE would fail on it).
func TestMigrateRecordsADroppedRecordAgain(t *testing.T) {
	ctx := context.Background()
	pool := testenv.PgPool(t)
	table, ob := migratedTable(t)
	execSQL(t, fmt.Sprintf(`INSERT INTO %q (event_id, event_type) VALUES ('kept', 't')`, table))
	execSQL(t, fmt.Sprintf(`DROP TABLE %q`, table+"_migrations"))
	res, err := ob.Migrate(ctx, pool)
	if err != nil || res.To != outbox.SchemaVersion() || res.Recreated {
		t.Fatalf("Migrate with its record dropped: %+v, %v; want it recorded again at %d", res, err, outbox.SchemaVersion())
	}
	if err := ob.CheckSchema(ctx, pool); err != nil {
		t.Fatalf("CheckSchema after the record was restored: %v", err)
	}
	var n int
	if err := pool.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %q WHERE event_id = 'kept'`, table)).Scan(&n); err != nil || n != 1 {
		t.Fatalf("the table's row: %d, %v; want it kept", n, err)
	}
}

// The record dropped and the table not what the steps make: the error
// names the record, not step 1's "already exists".
func TestMigrateNamesADroppedRecord(t *testing.T) {
	table, ob := migratedTable(t)
	execSQL(t, fmt.Sprintf(`DROP TABLE %q; ALTER TABLE %q DROP COLUMN tracestate`, table+"_migrations", table))
	_, err := ob.Migrate(context.Background(), testenv.PgPool(t))
	wantSchemaErr(t, "Migrate with its record dropped and a column gone", err, table+"_migrations")
	wantSchemaErr(t, "Migrate with its record dropped and a column gone", err, "column tracestate text")
}

// The table renamed away: its indexes keep their names, so creating it
// again would fail on them. The error says where they are.
func TestMigrateNamesARenamedTable(t *testing.T) {
	table, ob := migratedTable(t)
	old := table + "_old"
	testenv.DropTables(t, old)
	execSQL(t, fmt.Sprintf(`ALTER TABLE %q RENAME TO %q`, table, old))
	_, err := ob.Migrate(context.Background(), testenv.PgPool(t))
	wantSchemaErr(t, "Migrate after the table was renamed away", err, "(on "+old+")")
}

// Plane mode: a warren column dropped under a recorded migration. Migrate
// does not report nothing to do (CheckPlane would then refuse the table):
// it names the column.
func TestPlaneMigrateNamesADroppedWarrenColumn(t *testing.T) {
	ctx := context.Background()
	p := testenv.NewPlaneTable(t, true)
	ob := p.Outbox(outbox.Options{})
	if _, err := ob.Migrate(ctx, p.Pool); err != nil {
		t.Fatal(err)
	}
	p.Exec(`ALTER TABLE ` + p.Name + ` DROP COLUMN warren_last_error`)
	_, err := ob.Migrate(ctx, p.Pool)
	wantSchemaErr(t, "Plane Migrate without warren_last_error", err, "no column warren_last_error")
}

// Plane mode: Plane's table created again by Plane (its columns only)
// under warren's record: Migrate adds warren's columns and indexes again.
func TestPlaneMigrateRestoresARecreatedTable(t *testing.T) {
	ctx := context.Background()
	p := testenv.NewPlaneTable(t, true)
	ob := p.Outbox(outbox.Options{})
	if _, err := ob.Migrate(ctx, p.Pool); err != nil {
		t.Fatal(err)
	}
	fresh := testenv.NewPlaneTable(t, true)
	execSQL(t, fmt.Sprintf(`DROP TABLE %q; ALTER TABLE %q RENAME TO %q`, p.Name, fresh.Name, p.Name))
	res, err := ob.Migrate(ctx, p.Pool)
	if err != nil || !res.Recreated || res.To != outbox.PlaneSchemaVersion() {
		t.Fatalf("Migrate of a re-created Plane table: %+v, %v; want warren's columns added again", res, err)
	}
	if ps, err := ob.CheckPlane(ctx, p.Pool); err != nil || !ps.Migrated {
		t.Fatalf("CheckPlane after Migrate: %+v, %v", ps, err)
	}
}

// A session that cannot make the comparison's TEMP scratch table (a role
// without TEMP, a read-only transaction) still passes CheckSchema on an
// intact table: the comparison is skipped, not turned into an error that
// a relay would wait out for ever as "postgres unreachable".
func TestCheckSchemaWithoutTempTablesPassesAnIntactTable(t *testing.T) {
	_, ob := migratedTable(t)
	ctx := context.Background()
	tx, err := testenv.PgPool(t).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SET TRANSACTION READ ONLY`); err != nil {
		t.Fatal(err)
	}
	if err := ob.CheckSchema(ctx, tx); err != nil {
		t.Fatalf("CheckSchema in a read-only transaction: %v", err)
	}
}

// A CHECK constraint guards what producers write, and the relay handles a
// row written around one anyway: CheckSchema, the relay's start, passes a
// table that lacks one, while Migrate, which can make it, names it.
func TestCheckSchemaLeavesChecksToMigrate(t *testing.T) {
	table, ob := migratedTable(t)
	execSQL(t, fmt.Sprintf(`ALTER TABLE %q DROP CONSTRAINT %q`, table, table+"_extra_check"))
	if err := ob.CheckSchema(context.Background(), testenv.PgPool(t)); err != nil {
		t.Errorf("CheckSchema of a table without its extra check: %v", err)
	}
	_, err := ob.Migrate(context.Background(), testenv.PgPool(t))
	wantSchemaErr(t, "Migrate of a table without its extra check", err, table+"_extra_check")
}

// An UNLOGGED outbox loses every event not yet published when Postgres
// crashes or stops in immediate mode (it is emptied at recovery), while
// the business writes beside them survive: Migrate and CheckSchema (the
// relay's start) refuse it, saying how to make it logged.
func TestMigrateAndCheckSchemaRefuseAnUnloggedTable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testenv.PgPool(t)
	table, ob := migratedTable(t)
	execSQL(t, fmt.Sprintf(`ALTER TABLE %q SET UNLOGGED`, table))
	_, err := ob.Migrate(ctx, pool)
	wantSchemaErr(t, "Migrate of an unlogged table", err, "SET LOGGED")
	wantSchemaErr(t, "CheckSchema of an unlogged table", ob.CheckSchema(ctx, pool), "SET LOGGED")
	execSQL(t, fmt.Sprintf(`ALTER TABLE %q SET LOGGED`, table))
	if err := ob.CheckSchema(ctx, pool); err != nil {
		t.Fatalf("CheckSchema once logged again: %v", err)
	}
	// The migrations record: emptied by a crash, it would keep every
	// relay from starting until the table was migrated again.
	execSQL(t, fmt.Sprintf(`ALTER TABLE %q SET UNLOGGED`, table+"_migrations"))
	wantSchemaErr(t, "CheckSchema with an unlogged migrations record", ob.CheckSchema(ctx, pool), table+"_migrations is UNLOGGED")
}

// The same for Plane's table, which warren relays but does not make.
func TestCheckPlaneRefusesAnUnloggedTable(t *testing.T) {
	p := testenv.NewPlaneTable(t, true)
	p.Exec(`ALTER TABLE {table} SET UNLOGGED`)
	_, err := p.Outbox(outbox.Options{}).CheckPlane(context.Background(), testenv.PgPool(t))
	wantSchemaErr(t, "CheckPlane of an unlogged table", err, "SET LOGGED")
}
