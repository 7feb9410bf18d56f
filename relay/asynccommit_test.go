package relay_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/warrenmq/warren/internal/testenv"
)

// The relay's claims and settles commit without waiting for their WAL
// flush (a lost one costs a duplicate, never an event), and only they do:
// a producer sharing the relay's one-connection pool still commits at the
// session's setting. A trigger records the setting each statement ran
// under.
func TestAsyncCommitStaysInTheRelaysTransactions(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.bindQueue()
	got := consume(t, e.queue)
	seen := testenv.Name(t, "seen")
	testenv.DropTables(t, seen)
	e.exec(fmt.Sprintf(`CREATE TABLE %q (op text, setting text)`, seen))
	e.exec(fmt.Sprintf(`CREATE FUNCTION %q() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO %q VALUES (TG_OP, current_setting('synchronous_commit'));
	RETURN NULL;
END $$`, seen, seen))
	t.Cleanup(func() {
		e.exec(fmt.Sprintf(`DROP FUNCTION IF EXISTS %q() CASCADE`, seen))
	})
	e.exec(fmt.Sprintf(`CREATE TRIGGER %q AFTER INSERT OR UPDATE OR DELETE ON %q FOR EACH STATEMENT EXECUTE FUNCTION %q()`, seen, e.table, seen))

	ctx := context.Background()
	pcfg, err := pgxpool.ParseConfig(testenv.DatabaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	pcfg.MaxConns = 1
	shared, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(shared.Close)

	cfg := e.config(testenv.Name(t, "relay"))
	cfg.DatabaseURL, cfg.Pool = "", shared
	e.start(cfg)

	// One event per transaction, each after the last was delivered, so
	// the producer's statements and the relay's alternate on the one
	// connection.
	const events = 5
	for i := range events {
		tx, err := shared.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.outbox.Publish(ctx, tx, event(fmt.Sprintf("async-%d", i))); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		got.waitDistinct(t, i+1, 60*time.Second)
	}
	testenv.WaitFor(t, 60*time.Second, "an empty outbox", func() bool { return e.count("true") == 0 })

	rows, err := e.pool.Query(ctx, fmt.Sprintf(`SELECT op, setting, count(*) FROM %q GROUP BY 1, 2`, seen))
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	for rows.Next() {
		var op, setting string
		var n int
		if err := rows.Scan(&op, &setting, &n); err != nil {
			t.Fatal(err)
		}
		counts[op+" "+setting] += n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	// INSERT: the producer. UPDATE: claims (an empty claim updates no row
	// but still fires a statement trigger). DELETE: settles.
	if counts["INSERT on"] != events || counts["INSERT off"] != 0 {
		t.Errorf("producer statements by setting: %v; want all %d INSERTs at on", counts, events)
	}
	if counts["UPDATE off"] == 0 || counts["UPDATE on"] != 0 || counts["DELETE off"] == 0 || counts["DELETE on"] != 0 {
		t.Errorf("relay statements by setting: %v; want every claim (UPDATE) and settle (DELETE) at off", counts)
	}
	var setting string
	if err := shared.QueryRow(ctx, `SHOW synchronous_commit`).Scan(&setting); err != nil {
		t.Fatal(err)
	}
	if setting != "on" {
		t.Errorf("the shared connection's synchronous_commit is %q after the relay used it; want on", setting)
	}
}
