package pgdurable_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/warrenmq/warren/internal/pgdurable"
	"github.com/warrenmq/warren/internal/testenv"
)

// Check finds every relation a crash or a session's end would empty: an
// UNLOGGED table, an UNLOGGED partition at any level, a temporary table;
// and passes a logged one, or one that does not exist yet.
func TestCheckFindsEveryTableACrashWouldEmpty(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testenv.PgPool(t)
	name := func(kind string) (string, string) {
		n := testenv.Name(t, kind)
		testenv.DropTables(t, n)
		return n, pgx.Identifier{n}.Sanitize()
	}
	_, loggedQ := name("logged")
	unlogged, unloggedQ := name("unlogged")
	_, parentQ := name("parent")
	_, midQ := name("mid")
	leaf, leafQ := name("leaf")
	for _, sql := range []string{
		`CREATE TABLE ` + loggedQ + ` (id int)`,
		`CREATE UNLOGGED TABLE ` + unloggedQ + ` (id int)`,
		`CREATE TABLE ` + parentQ + ` (id int) PARTITION BY RANGE (id)`,
		`CREATE TABLE ` + midQ + ` PARTITION OF ` + parentQ + ` FOR VALUES FROM (0) TO (100) PARTITION BY RANGE (id)`,
		`CREATE UNLOGGED TABLE ` + leafQ + ` PARTITION OF ` + midQ + ` FOR VALUES FROM (0) TO (10)`,
	} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	if err := pgdurable.Check(ctx, pool, loggedQ, pgx.Identifier{testenv.Name(t, "absent")}.Sanitize()); err != nil {
		t.Errorf("a logged table and an absent one: %v", err)
	}
	for _, c := range []struct{ table, want string }{
		{unloggedQ, unlogged + " is UNLOGGED"},
		{parentQ, leaf + " is UNLOGGED"},
	} {
		err := pgdurable.Check(ctx, pool, loggedQ, c.table)
		if !errors.Is(err, pgdurable.ErrNotLogged) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "SET LOGGED") {
			t.Errorf("Check(%s) = %v; want ErrNotLogged saying %q and SET LOGGED", c.table, err, c.want)
		}
	}

	conn, err := pool.Acquire(ctx) // a temporary table is its session's
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `CREATE TEMP TABLE warren_temp_check (id int)`); err != nil {
		t.Fatal(err)
	}
	defer conn.Exec(ctx, `DROP TABLE warren_temp_check`)
	if err := pgdurable.Check(ctx, conn, "warren_temp_check"); !errors.Is(err, pgdurable.ErrNotLogged) || !strings.Contains(err.Error(), "temporary") {
		t.Errorf("Check of a temporary table = %v; want ErrNotLogged saying temporary", err)
	}
}
