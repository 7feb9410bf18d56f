package outbox

import (
	"strings"
	"testing"
	"testing/fstest"
)

// A step that builds an index concurrently runs outside a transaction,
// so the runner accepts it only in the one form it can resume and check:
// a single CREATE INDEX CONCURRENTLY IF NOT EXISTS {table_suffix} ON
// {table}. Warren's own sequence runs in one transaction and has none.
func TestConcurrentSteps(t *testing.T) {
	for body, want := range map[string]string{
		"-- why\nCREATE INDEX CONCURRENTLY IF NOT EXISTS {table_x_idx} ON {table} (id)\n  WHERE a IS NULL;\n": "{table_x_idx}",
		"ALTER TABLE {table} ADD COLUMN x integer;":                                                           "",
		"CREATE INDEX CONCURRENTLY {table_x_idx} ON {table} (id);":                                            "error",
		"CREATE INDEX CONCURRENTLY IF NOT EXISTS {table_x_idx} ON {table} (id); ALTER TABLE {table} …":        "error",
		"CREATE INDEX CONCURRENTLY IF NOT EXISTS {table_x_idx} ON other (id);":                                "error",
	} {
		steps, err := loadMigrations(fstest.MapFS{"m/001_x.sql": {Data: []byte(body)}}, "m")
		switch {
		case want == "error" && (err == nil || !strings.Contains(err.Error(), "one statement")):
			t.Errorf("%q: %v, want it refused", body, err)
		case want != "error" && (err != nil || steps[0].index != want):
			t.Errorf("%q: %+v, %v; want index %q", body, steps, err, want)
		}
	}
	for _, m := range warrenSequence.steps {
		if m.index != "" {
			t.Errorf("warren's step %d builds concurrently, but warren's sequence runs in one transaction", m.version)
		}
	}
	var plane []string
	for _, m := range planeSequence.steps {
		plane = append(plane, m.index)
	}
	if got := strings.Join(plane, ","); got != ",{table_warren_lapsed_idx},{table_warren_dead_idx},{table_warren_claim_idx}" {
		t.Errorf("Plane's steps build %s", got)
	}
}
