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
// schema shaped like Plane's current one (testenv.PlaneSchemaDDL):
// it must not name a column or table Plane does not have.
func TestPlaneDocCaptureCommandRunsOnPlanesSchema(t *testing.T) {
	t.Parallel()
	// The capture commands and the migrate command before them, which
	// makes the outbox table the triggers write to. Each capture runs with
	// --print, so that nothing is installed on the shared database.
	var migrate []string
	var captures [][]string
	for _, c := range docCommands(t, []string{"../../docs/plane.md"}) {
		switch {
		case len(c.args) < 2 || c.args[0] != "outbox":
		case c.args[1] == "migrate" && captures == nil:
			migrate = c.args
		case c.args[1] == "capture" && slices.Contains(c.args, "--print"):
			captures = append(captures, c.args)
		case c.args[1] == "capture":
			captures = append(captures, append(slices.Clone(c.args), "--print"))
		}
	}
	if migrate == nil || captures == nil {
		t.Fatal("docs/plane.md has no warren outbox migrate command followed by a warren outbox capture command")
	}
	// A schema of the test's own holds its issues table; the command
	// finds it by the search path, as it finds Plane's in public.
	schema := testenv.Name(t, "plane")
	pool := testenv.PgPool(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()+"; SET LOCAL search_path = "+pgx.Identifier{schema}.Sanitize()+"; "+testenv.PlaneSchemaDDL); err != nil {
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
	if res := runOutboxBin(t, environ, migrate...); res.code != 0 {
		t.Fatalf("warren %s: exit %d\n%s", strings.Join(migrate, " "), res.code, res.stderr)
	}
	var printed string
	for _, args := range captures {
		res := runOutboxBin(t, environ, args...)
		if res.code != 0 {
			t.Fatalf("warren %s: exit %d\n%s", strings.Join(args, " "), res.code, res.stderr)
		}
		// The doc promises Plane's events, which only the profiles write.
		if !strings.Contains(res.stdout, "CREATE") || !strings.Contains(res.stdout, "'plane.initiator_type'") {
			t.Errorf("warren %s printed no trigger writing Plane's shapes:\n%s", strings.Join(args, " "), res.stdout)
		}
		printed += res.stdout
	}
	for _, want := range []string{"workitem.state.updated", "epic.converted.to_workitem", "assignee.removed", "label.added", "state.deleted", "label.updated"} {
		if !strings.Contains(printed, want) {
			t.Errorf("no trigger the doc's commands print writes %s", want)
		}
	}
}
