package outbox_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/outbox"
)

// The purge runs batch after batch, so its select soon has a generic
// plan; that plan must read the finished rows through their index, not
// the whole table (pending rows and all) for every batch.
// Stats reads the pending rows once: its counts of claimed rows and its
// oldest row each scanned the table before, four reads of a backlog.
func TestStatsReadsThePendingRowsOnce(t *testing.T) {
	ob := testenv.NewOutboxTable(t)
	table := ob.Table.Name()
	ob.PublishN("pending", 3000)
	if _, err := ob.Pool.Exec(context.Background(), "ANALYZE "+pgx.Identifier{table}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	scans, indexes, plan := testenv.GenericPlan(t, ob.Pool, table, "", outbox.StatsSQL(table))
	finished := 0
	for _, i := range indexes {
		if i == table+"_finished_idx" {
			finished++
		}
	}
	// Two counts of finished rows on their index, one read of the rest.
	if len(scans)-finished != 1 {
		t.Errorf("Stats reads the table %d times (%v through %v), want the pending rows once; plan:\n%s", len(scans)-finished, scans, indexes, plan)
	}
}

func TestPurgeSelectUsesTheFinishedIndex(t *testing.T) {
	ob := testenv.NewOutboxTable(t)
	table := ob.Table.Name()
	testenv.StaleStatistics(t, ob.Pool, table)
	ob.PublishN("pending", 3000)
	if _, err := ob.Pool.Exec(context.Background(), `UPDATE `+pgx.Identifier{table}.Sanitize()+
		` SET state = 'dead', finished_at = now() - interval '1 day' WHERE id % 3 = 0`); err != nil {
		t.Fatal(err)
	}
	sql := outbox.PurgeSelectSQL(table)
	scans, indexes, plan := testenv.GenericPlan(t, ob.Pool, table, "", sql, []string{string(outbox.Delivered), string(outbox.Dead)}, time.Now(), 500)
	if slices.Contains(scans, "Seq Scan") || !slices.Contains(indexes, table+"_finished_idx") {
		t.Errorf("the purge's select reads the table by %v through %v, want the finished index; plan:\n%s", scans, indexes, plan)
	}
}
