package relay_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/outbox"
	"github.com/warrenmq/warren/relay"
)

// planNode is a node of EXPLAIN (FORMAT JSON)'s plan.
type planNode struct {
	NodeType  string     `json:"Node Type"`
	IndexName string     `json:"Index Name"`
	Plans     []planNode `json:"Plans"`
}

func (n planNode) walk(f func(planNode)) {
	f(n)
	for _, c := range n.Plans {
		c.walk(f)
	}
}

// On a migrated Plane table with a long processed history and a backlog,
// the claim reads the unclaimed rows in id order from warren's claim index:
// no Sort of every unclaimed row, no walk of the primary key past every
// processed one. The planner's choice is checked on the table's statistics
// (ANALYZE), not timed.
func TestPlaneClaimPlanUsesTheClaimIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p := testenv.NewPlaneTable(t, true)
	ob := p.Outbox(outbox.Options{})
	if _, err := ob.Migrate(ctx, p.Pool); err != nil {
		t.Fatal(err)
	}
	p.Insert(20000)
	// Plane's history: most rows processed, the oldest first.
	p.Exec(`UPDATE {table} SET claimed_at = now(), processed_at = now() WHERE id <= (SELECT min(id) + 14999 FROM {table})`)
	p.Exec(`ANALYZE {table}`)

	claimIdx := p.Name + "_warren_claim_idx"
	for name, query := range relay.PlaneStatements(ob, 5, true) {
		if !strings.HasPrefix(name, "claim") {
			continue
		}
		var out []byte
		if err := p.Pool.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+query, 250).Scan(&out); err != nil {
			t.Fatal(err)
		}
		var plans []struct{ Plan planNode }
		if err := json.Unmarshal(out, &plans); err != nil || len(plans) != 1 {
			t.Fatalf("%s: EXPLAIN output %s: %v", name, out, err)
		}
		var sorts int
		var usesIndex bool
		plans[0].Plan.walk(func(n planNode) {
			if strings.Contains(n.NodeType, "Sort") {
				sorts++
			}
			// Postgres cuts the name at 63 bytes, as it cut the index's.
			if n.IndexName != "" && strings.HasPrefix(claimIdx, n.IndexName) {
				usesIndex = true
			}
		})
		if sorts > 0 || !usesIndex {
			t.Errorf("%s: %d sorts, uses the claim index: %v; the plan:\n%s", name, sorts, usesIndex, out)
		}
	}
}
