package capture_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/outbox/capture"
)

// A session under session_replication_role = replica (a bulk loader, a
// restore, a migration skipping foreign-key checks) writes its events
// like any other.
func TestCaptureUnderReplicaRole(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.install(e.spec())
	e.execAs("replica", `INSERT INTO {source} (id, name) VALUES ('a', 'x')`)
	_, last := e.one(0, "workitem.created")
	e.execAs("replica", `UPDATE {source} SET state = 'done'`)
	_, last = e.one(last, "workitem.updated")
	e.execAs("replica", `DELETE FROM {source}`)
	e.one(last, "workitem.deleted")
}

// pathsDDL are the shapes of captured table every write path is tried
// on: plain (statement-level triggers) and partitioned by range of its
// key (row-level triggers), where rows with ids from 'm' on have no
// partition until the test makes one.
var pathsDDL = []struct{ name, ddl string }{
	{"plain", issuesDDL},
	{"partitioned", issuesDDL + ` PARTITION BY RANGE (id)`},
}

// Every statement that writes a captured row writes its events, or is
// refused: through the table or naming a partition (present at the
// install, or created or attached after it), COPY, ON CONFLICT, MERGE,
// foreign-key cascades; TRUNCATE is refused.
func TestCaptureEveryWritePath(t *testing.T) {
	t.Parallel()
	for _, shape := range pathsDDL {
		t.Run(shape.name, func(t *testing.T) {
			owners := testenv.Name(t, "own")
			testenv.DropTables(t, owners) // registered first: dropped after the table that references it
			e := newEnvWith(t, shape.ddl)
			partitioned := strings.Contains(shape.ddl, "PARTITION BY")
			ctx := context.Background()
			ident := func(name string) string { return pgx.Identifier{name}.Sanitize() }
			// Writes naming "the target": the table, or its first partition.
			target := "{source}"
			if partitioned {
				target = ident(testenv.Name(t, "pa"))
				e.exec(`CREATE TABLE ` + target + ` PARTITION OF {source} FOR VALUES FROM (MINVALUE) TO ('m')`)
			}
			e.exec(`CREATE TABLE ` + ident(owners) + ` (id text PRIMARY KEY)`)
			e.exec(`INSERT INTO ` + ident(owners) + ` VALUES ('o1'), ('o2')`)
			e.exec(`ALTER TABLE {source} ADD COLUMN owner text REFERENCES ` + ident(owners) + ` ON DELETE CASCADE ON UPDATE CASCADE`)
			e.install(e.spec())

			// want runs sql and asserts the events it wrote, by type and
			// entity.
			_, last := e.events(0)
			want := func(what string, run func() error, events ...string) {
				t.Helper()
				if err := run(); err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				evs, l := e.events(last)
				var got []string
				for _, ev := range evs {
					got = append(got, ev.Type+" "+ev.EntityID)
				}
				// In any order: MERGE fires its actions' triggers in its own.
				slices.Sort(got)
				slices.Sort(events)
				if strings.Join(got, ", ") != strings.Join(events, ", ") {
					t.Fatalf("%s wrote [%s], want [%s]", what, strings.Join(got, ", "), strings.Join(events, ", "))
				}
				last = l
			}
			sql := func(q string, args ...any) func() error { return func() error { return e.try(q, args...) } }

			want("INSERT naming the target", sql(`INSERT INTO `+target+` (id, name, owner) VALUES ('a1', 'x', 'o1'), ('a2', 'y', 'o2')`),
				"workitem.created a1", "workitem.created a2")
			want("UPDATE naming the target", sql(`UPDATE `+target+` SET state = 'done' WHERE id = 'a1'`), "workitem.updated a1")
			want("UPDATE through the table", sql(`UPDATE {source} SET state = 'todo' WHERE id = 'a1'`), "workitem.updated a1")
			want("DELETE naming the target", sql(`DELETE FROM `+target+` WHERE id = 'a2'`), "workitem.deleted a2")
			want("COPY into the target", func() error {
				_, err := e.pool.CopyFrom(ctx, pgx.Identifier{strings.Trim(e.render(target), `"`)}, []string{"id", "name", "owner"},
					pgx.CopyFromRows([][]any{{"c1", "copied", "o2"}}))
				return err
			}, "workitem.created c1")
			want("INSERT … ON CONFLICT DO UPDATE", sql(`INSERT INTO `+target+` (id, name) VALUES ('c1', 'upserted'), ('c2', 'new')
				ON CONFLICT (id) DO UPDATE SET name = excluded.name`), "workitem.updated c1", "workitem.created c2")
			want("INSERT … ON CONFLICT DO NOTHING", sql(`INSERT INTO `+target+` (id, name) VALUES ('c2', 'ignored') ON CONFLICT DO NOTHING`))
			want("MERGE", sql(`MERGE INTO `+target+` AS t USING (VALUES ('c1', 'merged'), ('c2', NULL), ('c3', 'inserted')) AS s(id, name) ON t.id = s.id
				WHEN MATCHED AND s.name IS NULL THEN DELETE
				WHEN MATCHED THEN UPDATE SET name = s.name
				WHEN NOT MATCHED THEN INSERT (id, name) VALUES (s.id, s.name)`),
				"workitem.created c3", "workitem.updated c1", "workitem.deleted c2")
			want("ON UPDATE CASCADE", sql(`UPDATE `+ident(owners)+` SET id = 'o3' WHERE id = 'o1'`), "workitem.updated a1")
			want("ON DELETE CASCADE", sql(`DELETE FROM `+ident(owners)+` WHERE id = 'o2'`), "workitem.deleted c1")

			var pgErr *pgconn.PgError
			for _, rel := range []string{"{source}", target} {
				if err := e.try(`TRUNCATE ` + rel + ` CASCADE`); !errors.As(err, &pgErr) || pgErr.Code != "0A000" || !strings.Contains(pgErr.Message, "TRUNCATE") {
					t.Fatalf("TRUNCATE %s of a captured table: %v, want it refused", rel, err)
				}
			}
			want("the refused TRUNCATEs", func() error { return nil })
			if !partitioned {
				return
			}

			// A partition created after the install, and a table attached
			// as one: writes naming them, and through the table.
			later, attached := ident(testenv.Name(t, "pb")), ident(testenv.Name(t, "pc"))
			testenv.DropTables(t, strings.Trim(attached, `"`)) // in case it fails before the ATTACH
			e.exec(`CREATE TABLE ` + later + ` PARTITION OF {source} FOR VALUES FROM ('m') TO ('t')`)
			e.exec(`CREATE TABLE ` + attached + ` (LIKE {source} INCLUDING DEFAULTS)`)
			e.exec(`ALTER TABLE ` + attached + ` ADD PRIMARY KEY (id)`)
			e.exec(`ALTER TABLE {source} ATTACH PARTITION ` + attached + ` FOR VALUES FROM ('t') TO (MAXVALUE)`)
			want("INSERT naming a partition created after the install", sql(`INSERT INTO `+later+` (id, name) VALUES ('n1', 'x')`), "workitem.created n1")
			want("INSERT naming a partition attached after the install", sql(`INSERT INTO `+attached+` (id, name) VALUES ('u1', 'x')`), "workitem.created u1")
			want("UPDATE of a partition attached after the install", sql(`UPDATE `+attached+` SET state = 'x'`), "workitem.updated u1")
			want("INSERT through the table into a later partition", sql(`INSERT INTO {source} (id, name) VALUES ('n2', 'x')`), "workitem.created n2")
			// A changed key moves the row to another partition: the entity's
			// end and a new one's start, as any key change.
			want("UPDATE moving a row across partitions", sql(`UPDATE {source} SET id = 'v1' WHERE id = 'n1'`),
				"workitem.deleted n1", "workitem.created v1")
			want("DELETE naming a later partition", sql(`DELETE FROM `+later), "workitem.deleted n2")
			e.execAs("replica", `INSERT INTO `+later+` (id, name) VALUES ('n3', 'x')`)
			want("INSERT under replica naming a later partition", func() error { return nil }, "workitem.created n3")

			// TRUNCATE triggers are not cloned: installing again gives the
			// later partitions theirs, and then checks them with the clones.
			if res := e.install(e.spec()); !res.Applied {
				t.Fatalf("install after new partitions: %+v, want the next version applied", res)
			}
			if err := e.try(`TRUNCATE ` + later); !errors.As(err, &pgErr) || pgErr.Code != "0A000" {
				t.Fatalf("TRUNCATE of a partition made before the last install: %v, want it refused", err)
			}
			e.exec(`ALTER TABLE ` + later + ` DISABLE TRIGGER warren_capture_insert`)
			if res := e.install(e.spec()); !res.Applied || !strings.Contains(res.Repaired, "on partition") ||
				!strings.Contains(res.Repaired, "warren_capture_insert is disabled") {
				t.Fatalf("install after a partition's trigger was disabled: %+v, want it repaired", res)
			}
			want("INSERT naming the repaired partition", sql(`INSERT INTO `+later+` (id, name) VALUES ('n4', 'x')`), "workitem.created n4")
		})
	}
}

// A table with inheritance children is refused: a statement naming a
// child writes the table's rows where no trigger of the table sees them.
// A child itself can be captured, and a statement naming its parent
// writes its events.
func TestCaptureInheritance(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	parent := testenv.Name(t, "par")
	testenv.DropTables(t, e.table, parent) // the child first
	e.exec(`ALTER TABLE {source} RENAME TO ` + pgx.Identifier{parent}.Sanitize())
	e.exec(`CREATE TABLE {source} () INHERITS (` + pgx.Identifier{parent}.Sanitize() + `)`)
	e.exec(`ALTER TABLE {source} ADD PRIMARY KEY (id)`)

	_, err := capture.Generate(context.Background(), e.pool, capture.Spec{Table: parent, Outbox: e.outbox.Name()})
	if !errors.Is(err, capture.ErrInvalidSpec) || !strings.Contains(err.Error(), "inheritance children") {
		t.Fatalf("capture of a table with inheritance children: %v, want it refused", err)
	}
	e.install(e.spec())
	e.exec(`INSERT INTO {source} (id, name) VALUES ('a', 'x')`)
	_, last := e.one(0, "workitem.created")
	e.exec(`UPDATE ` + pgx.Identifier{parent}.Sanitize() + ` SET state = 'done'`)
	_, last = e.one(last, "workitem.updated")
	e.exec(`DELETE FROM ` + pgx.Identifier{parent}.Sanitize())
	e.one(last, "workitem.deleted")
}

// The trigger function calls pg_catalog's functions whatever the writing
// session's search_path: look-alikes in a schema earlier on it, which run
// as the writer and could forge the events, are not called.
func TestCaptureSearchPathIsPinned(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	evil := pgx.Identifier{testenv.Name(t, "evil")}.Sanitize()
	t.Cleanup(func() {
		if _, err := e.pool.Exec(context.Background(), `DROP SCHEMA IF EXISTS `+evil+` CASCADE`); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	e.exec(`CREATE SCHEMA ` + evil)
	e.exec(`CREATE FUNCTION ` + evil + `.gen_random_uuid() RETURNS uuid LANGUAGE sql AS $$SELECT '00000000-0000-0000-0000-00000000bad0'::uuid$$`)
	e.exec(`CREATE FUNCTION ` + evil + `.current_setting(text, boolean) RETURNS text LANGUAGE sql AS $$SELECT 'FORGED'$$`)
	e.exec(`CREATE FUNCTION ` + evil + `.jsonb_build_object(VARIADIC text[]) RETURNS jsonb LANGUAGE sql AS $$SELECT '{"forged": true}'::jsonb$$`)
	e.install(e.spec())

	ctx := context.Background()
	err := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT set_config('search_path', $1, true)`, evil+", pg_catalog, public"); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, e.render(`INSERT INTO public.{source} (id, name) VALUES ('a', 'x')`))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	ev, _ := e.one(0, "workitem.created")
	if strings.HasSuffix(ev.EventID, "bad0") || ev.InitiatorType != "USER" || ev.InitiatorID != nil || ev.Data["name"] != "x" {
		t.Fatalf("the event was written by look-alike functions on the writer's search_path: %+v", ev)
	}
}

// Installing over an older install replaces its triggers: here a
// partitioned table's statement-level triggers, enabled for origin
// sessions only, which miss writes naming a partition.
func TestInstallUpgradesAnOlderInstall(t *testing.T) {
	// Serial: creates warren_capture_migrations, which every install
	// shares, outside the installs' advisory lock.
	e := newEnvWith(t, issuesDDL+` PARTITION BY RANGE (id)`)
	part := pgx.Identifier{testenv.Name(t, "pa")}.Sanitize()
	e.exec(`CREATE TABLE ` + part + ` PARTITION OF {source} FOR VALUES FROM (MINVALUE) TO (MAXVALUE)`)
	function := pgx.Identifier{e.table + "_warren_capture"}.Sanitize()
	e.exec(`CREATE FUNCTION ` + function + `() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RETURN NULL; END$$`)
	for _, op := range []string{"insert", "update", "delete"} {
		e.exec(fmt.Sprintf(`CREATE TRIGGER warren_capture_%s AFTER %s ON {source} FOR EACH STATEMENT EXECUTE FUNCTION %s()`, op, op, function))
	}
	e.exec(`CREATE TABLE IF NOT EXISTS ` + capture.MigrationsTable + ` (name text NOT NULL, version integer NOT NULL, checksum text NOT NULL,
		sql text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (name, version))`)
	e.exec(`INSERT INTO `+capture.MigrationsTable+` (name, version, checksum, sql) VALUES ($1, 1, 'older', '')`, "public."+e.table)

	if res := e.install(e.spec()); !res.Applied || res.Version != 2 {
		t.Fatalf("install over an older one: %+v, want version 2 applied", res)
	}
	e.exec(`INSERT INTO ` + part + ` (id, name) VALUES ('a', 'x')`)
	_, last := e.one(0, "workitem.created")
	e.execAs("replica", `UPDATE `+part+` SET state = 'done'`)
	e.one(last, "workitem.updated")
	if again := e.install(e.spec()); again.Applied {
		t.Fatalf("install after the upgrade: %+v, want a no-op", again)
	}
}

// Record on a row-level (partitioned) capture: a write naming a partition
// whose event the outbox refuses succeeds, and the failure is recorded.
func TestCaptureRecordPolicyOnAPartition(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, issuesDDL+` PARTITION BY RANGE (id)`)
	part := pgx.Identifier{testenv.Name(t, "pa")}.Sanitize()
	e.exec(`CREATE TABLE ` + part + ` PARTITION OF {source} FOR VALUES FROM (MINVALUE) TO (MAXVALUE)`)
	spec := e.spec()
	spec.OnFailure = capture.Record
	e.install(spec)
	e.poison("bad")
	e.exec(`INSERT INTO ` + part + ` (id, name) VALUES ('good', 'a'), ('bad', 'b')`)
	if evs, _ := e.events(0); len(evs) != 1 || evs[0].EntityID != "good" {
		t.Fatalf("outbox holds %+v, want good's created event only", evs)
	}
	if s, err := e.outbox.Stats(context.Background(), e.pool); err != nil || s.CaptureErrors != 1 {
		t.Fatalf("stats: %+v, %v; want one capture error", s, err)
	}
}
