package automation_test

import (
	"context"
	"sync"
	"testing"

	"github.com/warrenmq/warren/consumer"
	"github.com/warrenmq/warren/examples/app"
	"github.com/warrenmq/warren/examples/automation"
	"github.com/warrenmq/warren/internal/testenv"
)

// Replicas that start together all migrate at once; none may fail (Postgres
// does not make CREATE TABLE IF NOT EXISTS safe between sessions).
func TestConcurrentMigrationsSucceed(t *testing.T) {
	for round := range 3 {
		prefix := testenv.Name(t, "m")[:24]
		names := []string{prefix + "_items", prefix + "_outbox", prefix + "_outbox_migrations", prefix + "_rules", prefix + "_runs", prefix + "_dedup"}
		testenv.DropTables(t, names...)
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for range 4 {
			pool := testenv.PgPool(t)
			wg.Go(func() {
				a, err := app.New(names[0], names[1])
				if err != nil {
					errs <- err
					return
				}
				svc, err := automation.New(automation.Config{
					Consumer:   consumer.Config{Name: prefix},
					RulesTable: names[3], RunsTable: names[4], DedupTable: names[5],
				}, pool, a)
				if err != nil {
					errs <- err
					return
				}
				if err := a.Migrate(context.Background(), pool); err != nil {
					errs <- err
					return
				}
				errs <- svc.Migrate(context.Background())
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
	}
}
