package capture_test

// Regressions from an adversarial review of capture (branch
// attack-capture), each named for what it guarantees. Each failed on the
// code before its fix.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/outbox"
	"github.com/warrenmq/warren/outbox/capture"
)

func ident(name string) string { return pgx.Identifier{name}.Sanitize() }

// simpleDDL is a plain table with a key and one column.
const simpleDDL = `CREATE TABLE {source} (id int PRIMARY KEY, v text)`

func simpleSpec(e *env) capture.Spec {
	return capture.Spec{Table: e.table, Outbox: e.outbox.Name(), NoSoftDelete: true}
}

// A captured plain table attached later as a partition of a new parent
// (the usual "convert to partitioning" migration) would have statement-level
// triggers that statements naming the parent never fire: the capture's guard
// trigger makes PostgreSQL refuse the ATTACH.
func TestCaptureGuardRefusesAttachAsPartition(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, simpleDDL)
	e.install(simpleSpec(e))
	parent := testenv.Name(t, "par")
	testenv.DropTables(t, parent)
	e.exec(`CREATE TABLE ` + ident(parent) + ` (id int PRIMARY KEY, v text) PARTITION BY RANGE (id)`)
	err := e.try(`ALTER TABLE ` + ident(parent) + ` ATTACH PARTITION {source} FOR VALUES FROM (0) TO (1000)`)
	if err == nil {
		e.exec(`INSERT INTO ` + ident(parent) + ` VALUES (1, 'a')`)
		e.exec(`UPDATE ` + ident(parent) + ` SET v = 'b'`)
		e.exec(`DELETE FROM ` + ident(parent))
		evs, _ := e.events(0)
		t.Fatalf("ATTACH of a captured table accepted; insert, update and delete through the new parent wrote %d events", len(evs))
	}
	if !strings.Contains(err.Error(), "warren_capture_guard") {
		t.Fatalf("ATTACH refused, but not by the guard: %v", err)
	}
}

// The same when the captured table would become an inheritance child.
func TestCaptureGuardRefusesBecomingAnInheritanceChild(t *testing.T) {
	t.Parallel()
	parent := testenv.Name(t, "inh")
	testenv.DropTables(t, parent) // registered first: dropped after its child
	e := newEnvWith(t, simpleDDL)
	e.install(simpleSpec(e))
	e.exec(`CREATE TABLE ` + ident(parent) + ` (id int, v text)`)
	err := e.try(`ALTER TABLE {source} INHERIT ` + ident(parent))
	if err == nil {
		e.exec(`INSERT INTO {source} VALUES (1, 'a')`)
		_, last := e.one(0, e.table+".created")
		e.exec(`UPDATE ` + ident(parent) + ` SET v = 'b'`)
		e.exec(`DELETE FROM ` + ident(parent))
		evs, _ := e.events(last)
		t.Fatalf("INHERIT of a captured table accepted; update and delete through the parent wrote %d events", len(evs))
	}
	if !strings.Contains(err.Error(), "warren_capture_guard") {
		t.Fatalf("INHERIT refused, but not by the guard: %v", err)
	}
}

// The text form the change test and the payload are made from
// depends on the writer's extra_float_digits, which the function does
// not pin: a changed float column writes no event, and payloads round.
func TestCaptureChangeIgnoresWritersExtraFloatDigits(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, `CREATE TABLE {source} (id int PRIMARY KEY, price float8)`)
	e.install(simpleSpec(e))
	e.exec(`INSERT INTO {source} VALUES (1, 1.25)`)
	_, last := e.one(0, e.table+".created")
	err := pgx.BeginFunc(context.Background(), e.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(context.Background(), `SET LOCAL extra_float_digits = -14`); err != nil {
			return err
		}
		_, err := tx.Exec(context.Background(), e.render(`UPDATE {source} SET price = 1.4 WHERE id = 1`))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	e.one(last, e.table+".updated") // fails: no event
}

// A role that can create functions in the captured table's schema
// plants <table>_warren_capture() first. Install's CREATE OR REPLACE
// keeps the planter as the owner, so the planter can later replace the
// body the triggers run, as every writer of the table (a superuser
// writer makes the planter superuser; verified by hand).
func TestInstallRefusesAFunctionAnotherRoleOwns(t *testing.T) {
	// Serial: grants and revokes on schema public, whose ACL another grant
	// at once would fail to update (tuple concurrently updated).
	e := newEnvWith(t, simpleDDL)
	role := testenv.Name(t, "role")
	e.exec(`CREATE ROLE ` + ident(role))
	t.Cleanup(func() {
		ctx := context.Background()
		_, _ = e.pool.Exec(ctx, `DROP FUNCTION IF EXISTS `+ident(e.table+"_warren_capture")+`() CASCADE`)
		_, _ = e.pool.Exec(ctx, `REVOKE CREATE ON SCHEMA public FROM `+ident(role))
		_, _ = e.pool.Exec(ctx, `DROP ROLE `+ident(role))
	})
	e.exec(`GRANT CREATE ON SCHEMA public TO ` + ident(role)) // as on any database created before PG 15
	err := pgx.BeginFunc(context.Background(), e.pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(context.Background(), `SET LOCAL ROLE `+ident(role)+`;
			CREATE FUNCTION public.`+ident(e.table+"_warren_capture")+`() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RETURN NULL; END$$`)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := capture.Install(context.Background(), e.pool, simpleSpec(e)); err != nil {
		if !errors.Is(err, capture.ErrNotOwned) {
			t.Fatalf("refused, but not as an object another role owns: %v", err)
		}
		return
	}
	var owner string
	if err := e.pool.QueryRow(context.Background(), `SELECT proowner::regrole::text FROM pg_proc WHERE oid = to_regprocedure($1)`,
		ident(e.table+"_warren_capture")+"()").Scan(&owner); err != nil {
		t.Fatal(err)
	}
	if owner == role {
		t.Fatalf("the capture function the triggers call is owned by %s, who planted it", role)
	}
}

// Warren_capture_migrations is created and written unqualified
// with CREATE TABLE IF NOT EXISTS: a table of that name planted by
// another role in the installer's first schema is used, and its
// triggers run as the installer. Needs a database of its own, since the
// test database already has the table.
func TestInstallRefusesAMigrationsTableAnotherRoleOwns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	admin := testenv.PgPool(t)
	db, role := testenv.Name(t, "db"), testenv.Name(t, "role")
	for _, s := range []string{`CREATE DATABASE ` + ident(db), `CREATE ROLE ` + ident(role)} {
		if _, err := admin.Exec(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		_, _ = admin.Exec(ctx, `DROP DATABASE IF EXISTS `+ident(db)+` WITH (FORCE)`)
		_, _ = admin.Exec(ctx, `DROP ROLE IF EXISTS `+ident(role))
	})
	url := testenv.DatabaseURL(t)
	i := strings.LastIndex(url, "/")
	rest := ""
	if q := strings.Index(url[i:], "?"); q >= 0 {
		rest = url[i+q:]
	}
	pool, err := pgxpool.New(ctx, url[:i+1]+db+rest)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	ob, err := outbox.New("ob")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ob.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	_, err = pool.Exec(ctx, `
		CREATE TABLE orders (id int PRIMARY KEY, v text);
		CREATE TABLE ran_as (who text); GRANT INSERT ON ran_as TO PUBLIC;
		GRANT CREATE ON SCHEMA public TO `+ident(role)+`;
		SET ROLE `+ident(role)+`;
		CREATE TABLE warren_capture_migrations (name text NOT NULL, version integer NOT NULL, checksum text NOT NULL,
			sql text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (name, version));
		CREATE FUNCTION public.planted() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN
			INSERT INTO public.ran_as VALUES (current_user); RETURN NEW; END$$;
		CREATE TRIGGER planted BEFORE INSERT ON warren_capture_migrations FOR EACH ROW EXECUTE FUNCTION public.planted();
		RESET ROLE`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := capture.Install(ctx, pool, capture.Spec{Table: "orders", Outbox: "ob", NoSoftDelete: true}); err != nil {
		if !errors.Is(err, capture.ErrNotOwned) {
			t.Fatalf("refused, but not as an object another role owns: %v", err)
		}
		return
	}
	var who []string
	rows, _ := pool.Query(ctx, `SELECT who FROM ran_as`)
	who, err = pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if len(who) > 0 {
		t.Fatalf("a trigger planted by %s ran inside Install as %v", role, who)
	}
}

// Capturing the outbox table itself is accepted; then every insert
// into the outbox (outbox.Publish, every other capture) recurses until
// "stack depth limit exceeded".
func TestInstallRefusesCapturingTheOutbox(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, simpleDDL)
	spec := capture.Spec{Table: e.outbox.Name(), Outbox: e.outbox.Name(), NoSoftDelete: true}
	t.Cleanup(func() {
		ctx := context.Background()
		_, _ = e.pool.Exec(ctx, `DROP FUNCTION IF EXISTS `+ident(e.outbox.Name()+"_warren_capture")+`() CASCADE`)
		_, _ = e.pool.Exec(ctx, `DELETE FROM `+capture.MigrationsTable+` WHERE name = $1`, "public."+e.outbox.Name())
	})
	if _, err := capture.Install(context.Background(), e.pool, spec); err != nil {
		if !errors.Is(err, capture.ErrInvalidSpec) {
			t.Fatalf("refused, but not as an invalid spec: %v", err)
		}
		return
	}
	err := e.try(`INSERT INTO {outbox} (event_id, event_type) VALUES ('x', 'a.b')`)
	t.Fatalf("Install captured the outbox table itself; a plain publish now: %v", err)
}

// Install waits for the table's lock with no lock_timeout. Behind
// one idle transaction that wrote the table, it waits for ever, and every
// other writer of the table queues behind its LOCK TABLE.
func TestInstallGivesUpAfterLockTimeout(t *testing.T) {
	// Serial: its install holds the one advisory lock of every install
	// while it waits, and it counts every LOCK TABLE waiting in the
	// database.
	e := newEnvWith(t, simpleDDL)
	ctx := context.Background()
	holder, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(ctx)
	var holderPID int
	if err := holder.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&holderPID); err != nil {
		t.Fatal(err)
	}
	if _, err := holder.Exec(ctx, e.render(`INSERT INTO {source} VALUES (1, 'held')`)); err != nil {
		t.Fatal(err)
	}
	ictx, cancel := context.WithTimeout(ctx, 8*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { _, err := capture.Install(ictx, e.pool, simpleSpec(e)); done <- err }()
	// Meanwhile an ordinary writer, with a statement timeout, is stuck
	// behind the install's lock request (logged; the assertion is below).
	testenv.WaitFor(t, 5*time.Second, "install waiting for the lock", func() bool {
		var n int
		_ = e.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE 'LOCK TABLE%'`).Scan(&n)
		return n > 0
	})
	werr := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL statement_timeout = '1s'`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, e.render(`INSERT INTO {source} VALUES (2, 'other writer')`))
		return err
	})
	t.Logf("another writer while Install waits: %v", werr)
	err = <-done
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "55P03" && !strings.Contains(err.Error(), fmt.Sprint(holderPID)+": client backend") {
		t.Fatalf("Install gave up on the lock without naming the session holding it (pid %d): %v", holderPID, err)
	}
	if !errors.As(err, &pgErr) || pgErr.Code != "55P03" {
		t.Fatalf("Install should give up on its own (lock_timeout, 55P03) and say who holds the table; it waited until its context ended: %v", err)
	}
}

// The repair check looks at a trigger's name, function, level and
// enabled state only. A trigger recreated under the same name with
// WHEN (false) never fires, and Install still says "up to date".
func TestInstallRepairsATriggerWithAWhenClause(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, simpleDDL)
	e.install(simpleSpec(e))
	fn := ident(e.table + "_warren_capture")
	e.exec(`DROP TRIGGER warren_capture_delete ON {source};
		CREATE TRIGGER warren_capture_delete AFTER DELETE ON {source} REFERENCING OLD TABLE AS warren_old_rows
			FOR EACH STATEMENT WHEN (false) EXECUTE FUNCTION ` + fn + `();
		ALTER TABLE {source} ENABLE ALWAYS TRIGGER warren_capture_delete`)
	res := e.install(simpleSpec(e))
	if res.Repaired == "" {
		e.exec(`INSERT INTO {source} VALUES (1, 'a')`)
		e.exec(`DELETE FROM {source}`)
		evs, _ := e.events(0)
		t.Fatalf("Install says the capture is in place (applied %v); insert + delete wrote %d events", res.Applied, len(evs))
	}
}

// The function is named after the table's name, not the table. A
// captured table renamed away (kept, still written) keeps calling
// <old name>_warren_capture(): installing a new table under the old name
// would replace that function, and uninstalling it would drop the renamed
// table's triggers too (CASCADE). Both are refused, naming the renamed
// table; its triggers stay.
func TestInstallAndUninstallRefuseARenamedTablesFunction(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, simpleDDL)
	e.install(simpleSpec(e))
	archive := testenv.Name(t, "arc")
	testenv.DropTables(t, archive)
	e.exec(`ALTER TABLE {source} RENAME TO ` + ident(archive))
	e.exec(simpleDDL)
	_, err := capture.Install(context.Background(), e.pool, simpleSpec(e))
	if err == nil || !strings.Contains(err.Error(), archive) {
		t.Errorf("Install of a new %s over the function %s's triggers call: %v, want a refusal naming it", e.table, archive, err)
	}
	_, err = capture.Uninstall(context.Background(), e.pool, e.table)
	if err == nil || !strings.Contains(err.Error(), archive) {
		t.Errorf("Uninstall of %s, whose function %s's triggers call: %v, want a refusal naming it", e.table, archive, err)
	}
	var n int
	if err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_trigger WHERE tgrelid = to_regclass($1)`, ident(archive)).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatalf("the capture of %s was removed by what was done to %s", archive, e.table)
	}
	// Installing the renamed table's capture under its name frees the old function.
	e.install(capture.Spec{Table: archive, Outbox: e.outbox.Name(), NoSoftDelete: true})
	t.Cleanup(func() {
		_, _ = e.pool.Exec(context.Background(), `DROP FUNCTION IF EXISTS `+ident(archive+"_warren_capture")+`() CASCADE`)
		_, _ = e.pool.Exec(context.Background(), `DELETE FROM `+capture.MigrationsTable+` WHERE name = $1`, "public."+archive)
	})
	e.install(simpleSpec(e))
}

// The payload of the same row differs with the writer's
// bytea_output and IntervalStyle (hex "\\x6869" or escape "hi"; "1 day
// 02:00:00" or "P1DT2H"): a consumer decoding one format misreads the
// other.
func TestCapturePayloadIgnoresWritersOutputSettings(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, `CREATE TABLE {source} (id int PRIMARY KEY, b bytea, i interval)`)
	e.install(simpleSpec(e))
	e.exec(`INSERT INTO {source} VALUES (1, 'hi', '1 day 2 hours')`)
	err := pgx.BeginFunc(context.Background(), e.pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(context.Background(), e.render(`SET LOCAL bytea_output = escape; SET LOCAL IntervalStyle = iso_8601;
			INSERT INTO {source} VALUES (2, 'hi', '1 day 2 hours')`))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	evs, _ := e.events(0)
	if len(evs) != 2 || evs[0].Data["b"] != evs[1].Data["b"] || evs[0].Data["i"] != evs[1].Data["i"] {
		t.Fatalf("equal rows, different payloads: %v / %v", evs[0].Data, evs[1].Data)
	}
}

// With a DEFERRABLE primary key a transaction can hold two rows
// with one key between statements. Pairing by key then writes a stream
// whose last word on entity 1 is .deleted although the committed table
// has row 1.
func TestInstallRefusesADeferrableKey(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, `CREATE TABLE {source} (id int PRIMARY KEY DEFERRABLE INITIALLY DEFERRED, v text)`)
	e.exec(`INSERT INTO {source} VALUES (1, 'a'), (2, 'b')`)
	if _, err := capture.Install(context.Background(), e.pool, simpleSpec(e)); err != nil {
		if !errors.Is(err, capture.ErrInvalidSpec) || !strings.Contains(err.Error(), "DEFERRABLE") {
			t.Fatalf("refused, but not as a deferrable key: %v", err)
		}
		return
	}
	err := pgx.BeginFunc(context.Background(), e.pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(context.Background(), e.render(`UPDATE {source} SET id = 1 WHERE v = 'b'; UPDATE {source} SET id = 2 WHERE v = 'a'`))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	evs, _ := e.events(0)
	state := map[string]bool{"1": true, "2": true} // what a consumer applying the stream believes exists
	for _, ev := range evs {
		state[ev.EntityID] = !strings.HasSuffix(ev.Type, ".deleted")
	}
	if !state["1"] || !state["2"] {
		t.Fatalf("table holds rows 1 and 2; the stream says 1 exists: %v, 2 exists: %v (%d events)", state["1"], state["2"], len(evs))
	}
}

// Every event needs an entity id: an EntityIDColumn that may be NULL is
// refused, unless it is (part of) the primary key.
func TestGenerateRefusesANullableEntityIDColumn(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, `CREATE TABLE {source} (id int PRIMARY KEY, ext text, v text)`)
	spec := simpleSpec(e)
	spec.EntityIDColumn = "ext"
	_, err := capture.Generate(context.Background(), e.pool, spec)
	if !errors.Is(err, capture.ErrInvalidSpec) || !strings.Contains(err.Error(), "may be NULL") {
		t.Fatalf("nullable EntityIDColumn: %v, want it refused", err)
	}
}

// An EntityIDColumn that is not the key changes like a key: the old
// entity's .deleted and the new one's .created, never an .updated that
// moves the row to another entity id.
func TestCaptureEntityIDChangeIsDeletedAndCreated(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, `CREATE TABLE {source} (id int PRIMARY KEY, ext text NOT NULL, v text)`)
	spec := simpleSpec(e)
	spec.EntityIDColumn = "ext"
	e.install(spec)
	e.exec(`INSERT INTO {source} VALUES (1, 'a', 'x')`)
	_, last := e.one(0, e.table+".created")
	e.exec(`UPDATE {source} SET ext = 'b'`)
	evs, _ := e.events(last)
	got := map[string]string{}
	for _, ev := range evs {
		got[ev.EntityID] = ev.Type
	}
	if len(evs) != 2 || got["a"] != e.table+".deleted" || got["b"] != e.table+".created" {
		t.Fatalf("entity id a changed to b: want a deleted and b created, got %+v", evs)
	}
}

// A second install of a captured table with another outbox is refused:
// the first outbox's relay would stop seeing the table's events without a
// word. MoveOutbox moves them.
func TestInstallRefusesToMoveACaptureToAnotherOutbox(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, simpleDDL)
	e.install(simpleSpec(e))
	other := testenv.NewOutboxTable(t)
	spec := simpleSpec(e)
	spec.Outbox = other.Table.Name()
	if _, err := capture.Install(context.Background(), e.pool, spec); !errors.Is(err, capture.ErrInvalidSpec) || !strings.Contains(err.Error(), "MoveOutbox") {
		t.Fatalf("install with another outbox: %v, want it refused", err)
	}
	e.exec(`INSERT INTO {source} VALUES (1, 'a')`)
	e.one(0, e.table+".created")
	spec.MoveOutbox = true
	e.install(spec)
	e.exec(`INSERT INTO {source} VALUES (2, 'b')`)
	var n int
	if err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM `+ident(other.Table.Name())).Scan(&n); err != nil || n != 1 {
		t.Fatalf("after MoveOutbox the other outbox has %d events (%v), want 1", n, err)
	}
}

// The outbox's triggers would run as every writer of the captured table,
// and one that is another capture would make two captures write each
// other's events without end: an outbox with a trigger is refused.
func TestInstallRefusesAnOutboxWithTriggers(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, simpleDDL)
	fn := ident(e.outbox.Name() + "_audit")
	t.Cleanup(func() { _, _ = e.pool.Exec(context.Background(), `DROP FUNCTION IF EXISTS `+fn+`() CASCADE`) })
	e.exec(`CREATE FUNCTION ` + fn + `() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RETURN NULL; END$$;
		CREATE TRIGGER audit AFTER INSERT ON {outbox} FOR EACH ROW EXECUTE FUNCTION ` + fn + `()`)
	if _, err := capture.Install(context.Background(), e.pool, simpleSpec(e)); !errors.Is(err, capture.ErrNotOwned) || !strings.Contains(err.Error(), "triggers or rules") {
		t.Fatalf("install into an outbox with a trigger: %v, want it refused", err)
	}
}

// Under Record every writer of the captured table inserts into the
// capture errors table: one another role made (and can put a trigger on)
// is refused.
func TestInstallRefusesACaptureErrorsTableAnotherRoleOwns(t *testing.T) {
	// Serial: grants and revokes on schema public, whose ACL another grant
	// at once would fail to update (tuple concurrently updated).
	e := newEnvWith(t, simpleDDL)
	role := testenv.Name(t, "role")
	errorsTable := ident(e.outbox.CaptureErrorsTable())
	e.exec(`CREATE ROLE ` + ident(role) + `; GRANT CREATE ON SCHEMA public TO ` + ident(role))
	t.Cleanup(func() {
		ctx := context.Background()
		_, _ = e.pool.Exec(ctx, `DROP TABLE IF EXISTS `+errorsTable)
		_, _ = e.pool.Exec(ctx, `REVOKE CREATE ON SCHEMA public FROM `+ident(role))
		_, _ = e.pool.Exec(ctx, `DROP ROLE `+ident(role))
	})
	err := pgx.BeginFunc(context.Background(), e.pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(context.Background(), `SET LOCAL ROLE `+ident(role)+`; CREATE TABLE public.`+errorsTable+` (id bigint)`)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	spec := simpleSpec(e)
	spec.OnFailure = capture.Record
	if _, err := capture.Install(context.Background(), e.pool, spec); !errors.Is(err, capture.ErrNotOwned) || !strings.Contains(err.Error(), role) {
		t.Fatalf("install under Record with a planted capture errors table: %v, want it refused naming %s", err, role)
	}
	spec.OnFailure = capture.Fail // Fail does not write it
	e.install(spec)
}

// A soft delete is the column going from NULL to a value, and a DELETE of
// a row already soft deleted writes nothing more. A deleted_at that is NOT
// NULL (say DEFAULT 'infinity') can never mean that: taken by its name, it
// made every DELETE commit with no event. It is now an ordinary column,
// and named explicitly as the soft delete column it is refused.
func TestANotNullDeletedAtIsNoSoftDeleteColumn(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, `CREATE TABLE {source} (id int PRIMARY KEY, v text, deleted_at timestamptz NOT NULL DEFAULT 'infinity')`)
	spec := capture.Spec{Table: e.table, Outbox: e.outbox.Name(), EntityType: "issue", EventPrefix: "workitem"}
	if _, err := capture.Install(context.Background(), e.pool, spec); err != nil {
		t.Fatal(err)
	}
	e.exec(`INSERT INTO {source} (id, v) VALUES (1, 'x')`)
	_, last := e.events(0)
	e.exec(`DELETE FROM {source} WHERE id = 1`)
	if evs, _ := e.events(last); len(evs) != 1 || evs[0].Type != "workitem.deleted" {
		t.Fatalf("DELETE of row 1 wrote %+v, want one workitem.deleted", evs)
	}
	spec.SoftDeleteColumn = "deleted_at"
	if _, err := capture.Install(context.Background(), e.pool, spec); !errors.Is(err, capture.ErrInvalidSpec) || !strings.Contains(err.Error(), "NOT NULL") {
		t.Fatalf("Install naming a NOT NULL soft delete column: %v; want ErrInvalidSpec saying NOT NULL", err)
	}
}
