package capture_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/outbox/capture"
)

// Install is versioned: the same result again is a no-op, a changed spec
// or table is the next version and replaces the function, and Uninstall
// is a version too.
func TestInstallIsVersioned(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	spec := e.spec()
	first := e.install(spec)
	if !first.Applied || first.Version != 1 || first.Name != "public."+e.table {
		t.Fatalf("first install: %+v", first)
	}
	if again := e.install(spec); again.Applied || again.Version != 1 || again.Checksum != first.Checksum {
		t.Fatalf("install of an unchanged spec: %+v, want a no-op at version 1", again)
	}

	// A changed spec: state is no longer tracked, so changing it writes nothing.
	spec.Exclude = append(spec.Exclude, "state")
	if v2 := e.install(spec); !v2.Applied || v2.Version != 2 {
		t.Fatalf("install of a changed spec: %+v, want version 2 applied", v2)
	}
	e.exec(`INSERT INTO {source} (id, name, state) VALUES ('a', 'x', 'todo')`)
	ev, last := e.one(0, "workitem.created")
	if _, ok := ev.Data["state"]; ok {
		t.Fatalf("version 2 still tracks state: %v", ev.Data)
	}
	e.exec(`UPDATE {source} SET state = 'done'`)
	e.none(last, "update of a column version 2 does not track")

	// A column added to the table: the same spec generates new SQL.
	e.exec(`ALTER TABLE {source} ADD COLUMN estimate integer`)
	if v3 := e.install(spec); !v3.Applied || v3.Version != 3 {
		t.Fatalf("install after ADD COLUMN: %+v, want version 3", v3)
	}
	e.exec(`UPDATE {source} SET estimate = 5`)
	if ev, _ := e.one(last, "workitem.updated"); keys(ev.Previous) != "estimate" {
		t.Fatalf("the added column is not tracked: %v", ev.Previous)
	}
	_, last = e.events(0)

	ctx := context.Background()
	un, err := capture.Uninstall(ctx, e.pool, e.table)
	if err != nil || !un.Applied || un.Version != 4 {
		t.Fatalf("uninstall: %+v, %v", un, err)
	}
	e.exec(`UPDATE {source} SET name = 'y'`)
	e.none(last, "update after uninstall")
	if un, err := capture.Uninstall(ctx, e.pool, e.table); err != nil || un.Applied {
		t.Fatalf("second uninstall: %+v, %v, want a no-op", un, err)
	}
	var versions int
	if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM `+capture.MigrationsTable+` WHERE name = $1`, first.Name).Scan(&versions); err != nil || versions != 4 {
		t.Fatalf("%s holds %d versions (%v), want 4", capture.MigrationsTable, versions, err)
	}
}

// A spec the table cannot satisfy is refused with a clear error, and
// nothing is installed.
func TestGenerateRefusesBadSpecs(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	composite := testenv.Name(t, "cmp")
	keyless := testenv.Name(t, "nok")
	testenv.DropTables(t, composite, keyless)
	e.exec(`CREATE TABLE ` + composite + ` (a int, b int, PRIMARY KEY (a, b))`)
	e.exec(`CREATE TABLE ` + keyless + ` (a int)`)
	ctx := context.Background()
	for name, c := range map[string]struct {
		spec capture.Spec
		want string
	}{
		"composite key":      {capture.Spec{Table: composite, Outbox: e.outbox.Name()}, "composite primary key (a, b); set EntityIDColumn"},
		"no key":             {capture.Spec{Table: keyless, Outbox: e.outbox.Name()}, "has no primary key"},
		"unknown column":     {capture.Spec{Table: e.table, Outbox: e.outbox.Name(), Exclude: []string{"nope"}}, `no column "nope"`},
		"missing table":      {capture.Spec{Table: "no_such_table_x", Outbox: e.outbox.Name()}, "does not exist"},
		"bad table name":     {capture.Spec{Table: "Issues", Outbox: e.outbox.Name()}, "must be name or schema.name"},
		"nothing tracked":    {capture.Spec{Table: keyless, Outbox: e.outbox.Name(), Columns: []string{"a"}, Exclude: []string{"a"}}, "no column"},
		"bad policy":         {capture.Spec{Table: e.table, Outbox: e.outbox.Name(), OnFailure: "ignore"}, "OnFailure must be"},
		"bad setting":        {capture.Spec{Table: e.table, Outbox: e.outbox.Name(), InitiatorTypeSetting: "initiator"}, "custom setting"},
		"soft delete twice":  {capture.Spec{Table: e.table, Outbox: e.outbox.Name(), SoftDeleteColumn: "deleted_at", NoSoftDelete: true}, "exclude each other"},
		"control in prefix":  {capture.Spec{Table: e.table, Outbox: e.outbox.Name(), EventPrefix: "work\nitem"}, "control character"},
		"not UTF-8: prefix":  {capture.Spec{Table: e.table, Outbox: e.outbox.Name(), EventPrefix: "work\xffitem"}, "EventPrefix \"work\\xffitem\" is not UTF-8"},
		"not UTF-8: version": {capture.Spec{Table: e.table, Outbox: e.outbox.Name(), Version: "1\xc3"}, "is not UTF-8"},
		"bad subscriber":     {capture.Spec{Table: e.table, Outbox: e.outbox.Name(), Subscriber: "ignore"}, "Subscriber must be"},
		"unknown id column":  {capture.Spec{Table: composite, Outbox: e.outbox.Name(), EntityIDColumn: "c"}, `EntityIDColumn: table`},
		"unknown soft.del.":  {capture.Spec{Table: e.table, Outbox: e.outbox.Name(), SoftDeleteColumn: "removed_at"}, `no column "removed_at"`},
		"unknown workspace":  {capture.Spec{Table: e.table, Outbox: e.outbox.Name(), WorkspaceColumn: "ws"}, `no column "ws"`},
		"long event prefix":  {capture.Spec{Table: e.table, Outbox: e.outbox.Name(), EventPrefix: strings.Repeat("x", 250)}, "255"},
		"outbox not created": {capture.Spec{Table: e.table, Outbox: "no_such_outbox_x"}, "does not exist"},
	} {
		_, err := capture.Generate(ctx, e.pool, c.spec)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error containing %q", name, err, c.want)
		}
		if name != "outbox not created" && !errors.Is(err, capture.ErrInvalidSpec) {
			t.Errorf("%s: %v does not wrap ErrInvalidSpec", name, err)
		}
	}
	// A composite key is fine once the entity id is named.
	if _, err := capture.Generate(ctx, e.pool, capture.Spec{Table: composite, Outbox: e.outbox.Name(), EntityIDColumn: "b"}); err != nil {
		t.Errorf("composite key with EntityIDColumn: %v", err)
	}
}

// An Install whose SQL is unchanged still applies it again when what the
// last version created is no longer in place, since the table's changes
// write no events until it is; and says why.
func TestInstallRepairsWhatIsNoLongerInPlace(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	spec := e.spec()
	version := e.install(spec).Version
	function := pgx.Identifier{e.table + "_warren_capture"}.Sanitize() + "()"
	for i, c := range []struct {
		name, breakSQL, want string
		replica              bool // the broken capture misses only writes under session_replication_role = replica
	}{
		{name: "dropped trigger", breakSQL: `DROP TRIGGER warren_capture_insert ON {source}`, want: "trigger warren_capture_insert is missing"},
		{name: "disabled trigger", breakSQL: `ALTER TABLE {source} DISABLE TRIGGER warren_capture_insert`, want: "trigger warren_capture_insert is disabled"},
		{name: "replica-only trigger", breakSQL: `ALTER TABLE {source} ENABLE REPLICA TRIGGER warren_capture_insert`, want: "trigger warren_capture_insert is disabled"},
		{name: "origin-only trigger", breakSQL: `ALTER TABLE {source} ENABLE TRIGGER warren_capture_insert`, replica: true,
			want: "trigger warren_capture_insert does not fire under session_replication_role = replica"},
		{name: "every trigger disabled", breakSQL: `ALTER TABLE {source} DISABLE TRIGGER USER`, want: "trigger warren_capture_update is disabled"},
		{name: "function edited", breakSQL: `CREATE OR REPLACE FUNCTION ` + function + ` RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RETURN NULL; END$$`,
			want: "is not the generated one"},
		{name: "function dropped", breakSQL: `DROP FUNCTION ` + function + ` CASCADE`, want: `function "public".` + function + " is missing"},
		{name: "table rebuilt", breakSQL: `DROP TABLE {source}; ` + issuesDDL, want: "trigger warren_capture_delete is missing"},
	} {
		id := fmt.Sprintf("row-%d", i)
		e.exec(c.breakSQL)
		_, last := e.events(0)
		if c.replica {
			e.execAs("replica", `INSERT INTO {source} (id, name) VALUES ($1, 'x')`, id)
		} else {
			e.exec(`INSERT INTO {source} (id, name) VALUES ($1, 'x')`, id)
		}
		e.none(last, c.name+": the broken capture")
		res := e.install(spec)
		if !res.Applied || res.Version != version+1 || !strings.Contains(res.Repaired, c.want) {
			t.Fatalf("%s: install %+v, want version %d applied, Repaired saying %q", c.name, res, version+1, c.want)
		}
		version = res.Version
		e.exec(`DELETE FROM {source} WHERE id = $1`, id)
		if ev, _ := e.one(last, "workitem.deleted"); ev.EntityID != id {
			t.Fatalf("%s: after the repair, deleted event for %s", c.name, ev.EntityID)
		}
		if again := e.install(spec); again.Applied || again.Repaired != "" {
			t.Fatalf("%s: install after the repair: %+v, want a no-op", c.name, again)
		}
	}
}

// Install locks the table before it reads its columns: an ALTER TABLE
// in progress finishes first, and the trigger knows its column.
func TestInstallWaitsForAnAlterTableInProgress(t *testing.T) {
	// Serial: its install holds the one advisory lock of every install
	// while it waits for the ALTER TABLE.
	e := newEnv(t)
	ctx := context.Background()
	alter, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer alter.Rollback(ctx)
	if _, err := alter.Exec(ctx, e.render(`ALTER TABLE {source} ADD COLUMN estimate integer`)); err != nil {
		t.Fatal(err)
	}
	type result struct {
		res capture.Result
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := capture.Install(ctx, e.pool, e.spec())
		done <- result{res, err}
	}()
	testenv.WaitFor(t, 30*time.Second, "Install waiting for the table's lock", func() bool {
		var waiting int
		err := e.pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE relation = to_regclass($1) AND NOT granted`, e.table).Scan(&waiting)
		return err == nil && waiting > 0
	})
	if err := alter.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if r := <-done; r.err != nil || !r.res.Applied {
		t.Fatalf("install: %+v, %v", r.res, r.err)
	}
	e.exec(`INSERT INTO {source} (id, name, estimate) VALUES ('a', 'x', 3)`)
	if ev, _ := e.one(0, "workitem.created"); ev.Data["estimate"] != float64(3) {
		t.Fatalf("the column added while Install waited is not in the event: %v", ev.Data)
	}
}
