package postgres_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/warrenmq/warren/dedup/postgres"
	"github.com/warrenmq/warren/internal/testenv"
)

// An UNLOGGED store table is emptied when Postgres recovers from a crash
// or an immediate shutdown: every done-mark goes, and every event
// redelivered after it is handled a second time. Migrate refuses it.
func TestMigrateRefusesAnUnloggedTable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testenv.PgPool(t)
	table := testenv.Name(t, "dd")
	s := newStore(t, pool, postgres.Config{Table: table})
	if _, err := pool.Exec(ctx, `ALTER TABLE `+pgx.Identifier{table}.Sanitize()+` SET UNLOGGED`); err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(ctx); err == nil || !strings.Contains(err.Error(), "SET LOGGED") {
		t.Fatalf("Migrate of an unlogged table: %v; want an error saying SET LOGGED", err)
	}
}

// A partitioned store table is logged in name only when its partitions
// are UNLOGGED: the done-marks live in the partitions. Migrate refuses it
// and names the partition.
func TestMigrateRefusesAnUnloggedPartition(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testenv.PgPool(t)
	table := testenv.Name(t, "dd")
	part := table + "_p0"
	testenv.DropTables(t, table)
	if _, err := pool.Exec(ctx, `CREATE TABLE `+pgx.Identifier{table}.Sanitize()+` (
		key text PRIMARY KEY, token text NOT NULL, done_at timestamptz, expires_at timestamptz NOT NULL)
		PARTITION BY HASH (key)`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `CREATE UNLOGGED TABLE `+pgx.Identifier{part}.Sanitize()+` PARTITION OF `+
		pgx.Identifier{table}.Sanitize()+` FOR VALUES WITH (MODULUS 1, REMAINDER 0)`); err != nil {
		t.Fatal(err)
	}
	s, err := postgres.New(pool, postgres.Config{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(ctx); err == nil || !strings.Contains(err.Error(), part+" is UNLOGGED") {
		t.Fatalf("Migrate of a table with an unlogged partition: %v; want an error naming %s", err, part)
	}
}
