package postgres_test

import (
	"context"
	"log"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/dedup/postgres"
	"github.com/warrenmq/warren/middleware"
)

// The transactional inbox: the handler writes through the transaction
// postgres.Tx hands it, and the done-mark commits in the same transaction,
// so the handler's writes happen exactly once.
func Example_transactional() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	store, err := postgres.New(pool, postgres.Config{Table: "automation_inbox"})
	if err != nil {
		log.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		log.Fatal(err)
	}

	handler := middleware.Chain(
		middleware.Recover(),
		middleware.Dedup(store, middleware.DedupOptions{Transactional: true, Lease: 2 * time.Minute}),
		middleware.Timeout(time.Minute),
	)(warren.HandlerFunc(func(ctx context.Context, m *warren.Message) error {
		tx, _ := postgres.Tx(ctx)
		_, err := tx.Exec(ctx, `INSERT INTO automation_runs (event_id, entity_id) VALUES ($1, $2)`, m.Event.ID, m.Event.EntityID)
		return err
	}))
	_ = handler // register it with the consumer

	// Keep the table small: delete expired rows now and then (from a
	// ticker loop the service owns, or a cron job).
	if _, err := store.Purge(ctx); err != nil {
		log.Print(err)
	}
}
