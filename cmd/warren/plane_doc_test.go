package main

import (
	"context"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/warrenmq/warren/internal/testenv"
)

// docs/plane.md step 3's capture command, as a reader copies it, runs on a
// schema shaped like Plane's current one (testenv.PlaneIssuesSchemaDDL):
// it must not name a column or table Plane does not have.
func TestPlaneDocCaptureCommandRunsOnPlanesSchema(t *testing.T) {
	t.Parallel()
	// The capture command and the migrate command before it, which makes
	// the outbox table the triggers write to.
	var migrate, capture []string
	for _, c := range docCommands(t, []string{"../../docs/plane.md"}) {
		switch {
		case len(c.args) < 2 || c.args[0] != "outbox":
		case c.args[1] == "migrate" && capture == nil:
			migrate = c.args
		case c.args[1] == "capture":
			capture = c.args
		}
	}
	if migrate == nil || capture == nil {
		t.Fatal("docs/plane.md has no warren outbox migrate command followed by a warren outbox capture command")
	}
	if !slices.Contains(capture, "--print") {
		t.Fatalf("the command %q lacks --print, which this test relies on to install nothing", capture)
	}
	// A schema of the test's own holds its issues table; the command
	// finds it by the search path, as it finds Plane's in public.
	schema := testenv.Name(t, "plane")
	pool := testenv.PgPool(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()+"; SET LOCAL search_path = "+pgx.Identifier{schema}.Sanitize()+"; "+testenv.PlaneIssuesSchemaDDL); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		pool.Exec(context.Background(), "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
	})
	u, err := url.Parse(testenv.DatabaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	environ := map[string]string{"DATABASE_URL": u.String()}
	var res result
	for _, args := range [][]string{migrate, capture} {
		if res = runOutboxBin(t, environ, args...); res.code != 0 {
			t.Fatalf("warren %s: exit %d\n%s", strings.Join(args, " "), res.code, res.stderr)
		}
	}
	if !strings.Contains(res.stdout, "CREATE") {
		t.Errorf("the command printed no trigger:\n%s", res.stdout)
	}
	// The doc promises Plane's events, which only the profile writes.
	if !strings.Contains(res.stdout, "shape: plane") || !strings.Contains(res.stdout, "workitem.state.updated") {
		t.Errorf("the command's trigger does not write Plane's events (no Plane shape, no workitem.state.updated):\n%s", res.stdout)
	}
}
