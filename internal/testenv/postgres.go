package testenv

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// PgPool opens a pool on the test database and closes it when t ends.
func PgPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	url := DatabaseURL(t)
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatalf("open pool: %v\nstart the services with: %s", err, StartCommand)
	}
	t.Cleanup(pool.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := pool.Ping(ctx); err != nil {
		t.Fatalf("ping PostgreSQL: %v\nstart the services with: %s", err, StartCommand)
	}
	return pool
}

// PoolAt opens a pool on the database at url (a private server's),
// closed when t ends.
func PoolAt(t testing.TB, url string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// Listen opens a connection of its own that LISTENs on channel, closed
// when t ends: a test reads the notifications a commit sent from it.
func Listen(t testing.TB, channel string) *pgx.Conn {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, DatabaseURL(t))
	if err != nil {
		t.Fatalf("connect a listener: %v\nstart the services with: %s", err, StartCommand)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	return conn
}

// DropTables drops the tables (if they exist) when t ends, on a connection
// of its own, so it works after the test's pools are closed. Register it
// before anything that uses the tables: cleanups run last-registered first.
func DropTables(t testing.TB, names ...string) {
	t.Helper()
	url := DatabaseURL(t)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Errorf("cleanup: %v", err)
			return
		}
		defer conn.Close(ctx)
		for _, n := range names {
			if _, err := conn.Exec(ctx, "DROP TABLE IF EXISTS "+pgx.Identifier{n}.Sanitize()); err != nil {
				t.Errorf("cleanup: drop table %s: %v", n, err)
			}
		}
	})
}

// TerminateBackends terminates every Postgres backend whose
// application_name contains match, the way a failover or a DBA would, and
// returns how many it terminated. match must be specific to the test (at
// least 8 bytes, e.g. from Name): the database is shared.
func TerminateBackends(t testing.TB, match string) int {
	t.Helper()
	if len(strings.TrimSpace(match)) < 8 {
		t.Fatalf("TerminateBackends: match %q is too broad", match)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, DatabaseURL(t))
	if err != nil {
		t.Fatalf("TerminateBackends: %v", err)
	}
	defer conn.Close(ctx)
	var n int
	err = conn.QueryRow(ctx, `
		SELECT count(*) FILTER (WHERE pg_terminate_backend(pid))
		FROM pg_stat_activity
		WHERE strpos(application_name, $1) > 0 AND pid <> pg_backend_pid()`, match).Scan(&n)
	if err != nil {
		t.Fatalf("TerminateBackends: %v", err)
	}
	return n
}
