package postgres_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/warrenmq/warren/dedup"
	"github.com/warrenmq/warren/dedup/postgres"
	"github.com/warrenmq/warren/internal/testenv"
)

// The per-message cost of deduplication: the store's Claim + Complete (two
// statements, two round trips) and, in transactional mode, Claim +
// WithinTx (the claim's round trip, then BEGIN and the done-mark with the
// COMMIT) against the floor, one bare INSERT … ON
// CONFLICT DO NOTHING into the same table, each on a fresh key,
// sequentially and from 16 goroutines on a 16-connection pool. Run with
//
//	go test -run '^$' -bench . -benchtime 2000x ./dedup/postgres/
func BenchmarkDedup(b *testing.B) {
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(testenv.DatabaseURL(b))
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns = 16
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	table := testenv.Name(b, "bench")
	testenv.DropTables(b, table)
	store, err := postgres.New(pool, postgres.Config{Table: table})
	if err != nil {
		b.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	bare := "INSERT INTO " + pgx.Identifier{table}.Sanitize() + " (key, token, expires_at) VALUES ($1, $2, now() + interval '1 minute') ON CONFLICT DO NOTHING"
	testenv.BenchSeqAnd16(b, "ClaimComplete", func() error {
		c, err := store.Claim(ctx, rand.Text(), time.Minute)
		if err != nil || c.Result != dedup.Acquired {
			return fmt.Errorf("Claim = %+v, %v", c, err)
		}
		return store.Complete(ctx, c)
	})
	// The transactional mode with a handler that writes nothing: the
	// claim, then the handler's transaction, its done-mark and commit.
	testenv.BenchSeqAnd16(b, "ClaimWithinTx", func() error {
		c, err := store.Claim(ctx, rand.Text(), time.Minute)
		if err != nil || c.Result != dedup.Acquired {
			return fmt.Errorf("Claim = %+v, %v", c, err)
		}
		return store.WithinTx(ctx, c, func(context.Context) error { return nil })
	})
	testenv.BenchSeqAnd16(b, "BareInsertOnConflict", func() error {
		_, err := pool.Exec(ctx, bare, rand.Text(), "x")
		return err
	})
}
