package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/warrenmq/warren/dedup"
	"github.com/warrenmq/warren/dedup/postgres"
	"github.com/warrenmq/warren/internal/testenv"
)

// The consumer acks a message once WithinTx returns nil, so its commit
// (the handler's writes and the done-mark) must be on disk by then,
// whatever synchronous_commit the role or database sets: a commit a crash
// takes back after the ack loses the event's effect, with no copy left to
// redo it. The server here commits asynchronously by default, its WAL
// writer slowed so that an asynchronous commit is still in memory at the
// crash.
func TestWithinTxCommitSurvivesACrashUnderAsyncCommit(t *testing.T) {
	t.Parallel()
	server := testenv.NewPrivatePostgres(t, "synchronous_commit=off", "wal_writer_delay=10000")
	ctx := context.Background()
	pool := testenv.PoolAt(t, server.URL)
	work := pgx.Identifier{"work"}.Sanitize()
	if _, err := pool.Exec(ctx, `CREATE TABLE `+work+` (id text PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	cfg := postgres.Config{Table: "dedup"}
	s, err := postgres.New(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `CHECKPOINT`); err != nil { // the tables themselves outlive the crash
		t.Fatal(err)
	}
	c, err := s.Claim(ctx, "order:1", time.Minute)
	if err != nil || c.Result != dedup.Acquired {
		t.Fatalf("claim: %v %v", c.Result, err)
	}
	if err := s.WithinTx(ctx, c, func(ctx context.Context) error {
		tx, _ := postgres.Tx(ctx)
		_, err := tx.Exec(ctx, `INSERT INTO `+work+` VALUES ('order:1')`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	// WithinTx returned nil: the consumer would ack the message now.
	if err := server.Crash(time.Minute); err != nil {
		t.Fatal(err)
	}
	server.Start()
	pool = testenv.PoolAt(t, server.URL)
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+work).Scan(&n); err != nil {
		t.Fatal(err)
	}
	s, err = postgres.New(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	again, err := s.Claim(ctx, "order:1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 || again.Result != dedup.Done {
		t.Errorf("after WithinTx returned nil and a crash: %d rows of the handler's work (want 1), the key claims as %v (want Done)", n, again.Result)
	}
}
