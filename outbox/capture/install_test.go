package capture_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/outbox/capture"
)

// Install is versioned: the same result again is a no-op, a changed spec
// or table is the next version and replaces the function, and Uninstall
// is a version too.
func TestInstallIsVersioned(t *testing.T) {
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
