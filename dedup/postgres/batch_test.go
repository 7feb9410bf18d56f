package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/warrenmq/warren/dedup"
	"github.com/warrenmq/warren/dedup/deduptest"
	"github.com/warrenmq/warren/dedup/internal/storedkey"
	"github.com/warrenmq/warren/internal/testenv"
)

// batchStore is a store with one batch in flight at a time, on a table of
// its own, and a way to hold that batch: a claim of the key "blocker"
// waits on a row lock that hold takes.
type batchStore struct {
	*Store
	table string
}

func newBatchStore(t *testing.T) batchStore {
	t.Helper()
	table := testenv.Name(t, "dd")
	testenv.DropTables(t, table)
	s, err := New(testenv.PgPool(t), Config{Table: table, Batching: dedup.Batching{MaxBatchesInFlight: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return batchStore{s, pgx.Identifier{table}.Sanitize()}
}

// holdBatch puts a batch in flight that waits until release is called:
// another transaction inserts the key "blocker" and keeps it uncommitted,
// and a claim of it waits for that transaction's end. The returned
// channel gets the blocked claim's result.
func (s batchStore) holdBatch(t *testing.T) (release func(), blocked <-chan error) {
	t.Helper()
	ctx := context.Background()
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO `+s.table+` (key, token, expires_at) VALUES ('blocker', 'x', now())`); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := s.Claim(ctx, "blocker", time.Minute)
		done <- err
	}()
	// The claim is in flight once it waits for the lock.
	testenv.WaitFor(t, 60*time.Second, "the blocker's claim to wait for its row lock", func() bool {
		var waiting bool
		err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE '%unnest%' AND query LIKE '%'||$1||'%')`, strings.Trim(s.table, `"`)).Scan(&waiting)
		return err == nil && waiting
	})
	var once bool
	return func() {
		if !once {
			once = true
			tx.Rollback(ctx)
		}
	}, done
}

func (s batchStore) claimAsync(key string) <-chan claimResult {
	out := make(chan claimResult, 1)
	go func() {
		c, err := s.Claim(context.Background(), key, time.Minute)
		out <- claimResult{c, err}
	}()
	return out
}

type claimResult struct {
	claim dedup.Claim
	err   error
}

// Claims made while a batch is in flight go out together in the next one,
// and a key that fails — here a trigger refuses it — fails its own claim
// only: the batch is sent again call by call and every other claim is
// acquired.
func TestOneKeysFailureFailsOnlyItsOwnClaim(t *testing.T) {
	t.Parallel()
	s := newBatchStore(t)
	ctx := context.Background()
	fn := testenv.Name(t, "refuse")
	_, err := s.pool.Exec(ctx, fmt.Sprintf(`
CREATE FUNCTION %[1]s() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF NEW.key = 'poison' THEN RAISE EXCEPTION 'key poison refused by the test'; END IF;
	RETURN NEW;
END $$;
CREATE TRIGGER refuse BEFORE INSERT OR UPDATE ON %[2]s FOR EACH ROW EXECUTE FUNCTION %[1]s();`, pgx.Identifier{fn}.Sanitize(), s.table))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.pool.Exec(context.Background(), `DROP TABLE IF EXISTS `+s.table+`; DROP FUNCTION IF EXISTS `+pgx.Identifier{fn}.Sanitize()+`()`)
	})

	release, blocked := s.holdBatch(t)
	defer release()
	keys := []string{"k1", "k2", "poison", "k3", "k4", "k5", "k6", "k7"}
	results := make(map[string]<-chan claimResult)
	for i, k := range keys {
		results[k] = s.claimAsync(k)
		testenv.WaitFor(t, 60*time.Second, "the claim to queue", func() bool { return s.batcher.Waiting() == i+1 })
	}
	release()
	if err := <-blocked; err != nil {
		t.Fatalf("blocker's claim: %v", err)
	}
	for _, k := range keys {
		r := <-results[k]
		if k == "poison" {
			var pgErr *pgconn.PgError
			if !errors.As(r.err, &pgErr) || !strings.Contains(pgErr.Message, "refused by the test") {
				t.Errorf("claim of poison = %+v, %v; want the trigger's error", r.claim, r.err)
			}
			continue
		}
		if r.err != nil || r.claim.Result != dedup.Acquired {
			t.Errorf("claim of %s = %+v, %v; want acquired despite the poison key in its batch", k, r.claim, r.err)
			continue
		}
		if err := s.Complete(ctx, r.claim); err != nil {
			t.Errorf("complete %s: %v", k, err)
		}
	}
	if n := s.oneByOne.Load(); n != 1 {
		t.Errorf("%d batches sent again one by one, want 1 (the batch with the poison key)", n)
	}
}

// Two claims of one key in one batch are answered as two claims in a row
// are: the first acquires, the second finds the key busy. The statement
// could not take the key twice, so the batch sends it once.
func TestRepeatedKeyInABatch(t *testing.T) {
	t.Parallel()
	s := newBatchStore(t)
	release, blocked := s.holdBatch(t)
	defer release()
	var results []<-chan claimResult
	for i, k := range []string{"same", "other", "same"} {
		results = append(results, s.claimAsync(k))
		testenv.WaitFor(t, 60*time.Second, "the claim to queue", func() bool { return s.batcher.Waiting() == i+1 })
	}
	release()
	if err := <-blocked; err != nil {
		t.Fatal(err)
	}
	got := map[dedup.Result]int{}
	for i, ch := range results {
		r := <-ch
		if r.err != nil {
			t.Fatalf("claim %d: %v", i, r.err)
		}
		if r.claim.Key == "same" {
			got[r.claim.Result]++
		} else if r.claim.Result != dedup.Acquired {
			t.Errorf("claim of other = %v, want acquired", r.claim.Result)
		}
	}
	if got[dedup.Acquired] != 1 || got[dedup.Busy] != 1 {
		t.Errorf("two claims of one key in a batch: %v; want one acquired and one busy", got)
	}
	if n := s.oneByOne.Load(); n != 0 {
		t.Errorf("the batch failed and was sent one by one (%d); a repeated key must not fail it", n)
	}
}

// Claims, completions and releases of one batch share one transaction and
// each gets its own answer: a completion of a lost lease reports it lost,
// a release frees its key, a claim of a key completed in the same batch
// finds it done.
func TestMixedBatch(t *testing.T) {
	t.Parallel()
	s := newBatchStore(t)
	ctx := context.Background()
	claim := func(key string) dedup.Claim {
		c, err := s.Claim(ctx, key, time.Minute)
		if err != nil || c.Result != dedup.Acquired {
			t.Fatalf("Claim(%s) = %+v, %v", key, c, err)
		}
		return c
	}
	toComplete, toRelease := claim("complete-me"), claim("release-me")
	lost := claim("lost")
	lost.Token = "not-the-holder"

	release, blocked := s.holdBatch(t)
	defer release()
	errs := make(chan error, 3)
	queue := func(n int, f func() error) {
		go func() { errs <- f() }()
		testenv.WaitFor(t, 60*time.Second, "the call to queue", func() bool { return s.batcher.Waiting() == n })
	}
	queue(1, func() error { return s.Complete(ctx, toComplete) })
	queue(2, func() error { return s.Release(ctx, toRelease) })
	queue(3, func() error {
		if err := s.Complete(ctx, lost); !errors.Is(err, dedup.ErrLeaseLost) {
			return fmt.Errorf("complete of a claim that does not hold its key = %v, want ErrLeaseLost", err)
		}
		return nil
	})
	again := s.claimAsync("complete-me")
	testenv.WaitFor(t, 60*time.Second, "the claim to queue", func() bool { return s.batcher.Waiting() == 4 })
	freed := s.claimAsync("release-me")
	testenv.WaitFor(t, 60*time.Second, "the claim to queue", func() bool { return s.batcher.Waiting() == 5 })
	release()
	if err := <-blocked; err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if r := <-again; r.err != nil || r.claim.Result != dedup.Done {
		t.Errorf("claim of a key completed in the same batch = %+v, %v; want done", r.claim, r.err)
	}
	if r := <-freed; r.err != nil || r.claim.Result != dedup.Acquired {
		t.Errorf("claim of a key released in the same batch = %+v, %v; want acquired", r.claim, r.err)
	}
	if n := s.oneByOne.Load(); n != 0 {
		t.Errorf("%d batches failed and were sent one by one", n)
	}
}

// On a new table, which the planner believes tiny, the batch's statements
// still look keys up by index: the plan pgx caches for the connection's
// life must not scan the whole table, which grows with every key.
func TestBatchStatementsLookKeysUpByIndex(t *testing.T) {
	t.Parallel()
	s := newBatchStore(t)
	ctx := context.Background()
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	for _, q := range []string{indexPlansSQL, `SET LOCAL plan_cache_mode = force_generic_plan`} {
		if _, err := tx.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	for _, st := range []struct{ name, sql, args string }{
		{"claim", s.claimManySQL, "(ARRAY['a','b'], ARRAY['x','y'], ARRAY[1000,1000])"},
		{"complete", s.completeManySQL, "(ARRAY['a','b'], ARRAY['x','y'], 1000)"},
		{"release", s.releaseManySQL, "(ARRAY['a','b'], ARRAY['x','y'])"},
	} {
		name := testenv.Name(t, st.name)
		if _, err := tx.Exec(ctx, "PREPARE "+name+" AS "+st.sql); err != nil {
			t.Fatal(err)
		}
		rows, err := tx.Query(ctx, "EXPLAIN EXECUTE "+name+st.args)
		if err != nil {
			t.Fatal(err)
		}
		plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		if text := strings.Join(plan, "\n"); strings.Contains(text, "Seq Scan") {
			t.Errorf("%s's cached plan scans the table:\n%s", st.name, text)
		}
	}
}

// With batching off every call is a statement of its own; the store keeps
// its contract either way.
func TestConformanceUnbatched(t *testing.T) {
	// Serial: its lease and retention subtests need the store to answer
	// within deduptest's 300 ms shortLease and shortRetention.
	deduptest.Run(t, func(t *testing.T, retention time.Duration) dedup.Store {
		table := testenv.Name(t, "dd")
		testenv.DropTables(t, table)
		s, err := New(testenv.PgPool(t), Config{Table: table, Retention: retention, Batching: dedup.Batching{MaxBatch: 1}})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Migrate(context.Background()); err != nil {
			t.Fatal(err)
		}
		return s
	})
}

// replicaPool is a pool whose backends carry an application_name of their
// own, so a test can see when they wait for a lock.
func replicaPool(t *testing.T) (*pgxpool.Pool, string) {
	t.Helper()
	name := testenv.Name(t, "app")
	cfg, err := pgxpool.ParseConfig(testenv.DatabaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = name
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool, name
}

// waitForLockWaits waits until n backends named app wait for a lock.
func waitForLockWaits(t *testing.T, pool *pgxpool.Pool, app string, n int) {
	t.Helper()
	testenv.WaitFor(t, 60*time.Second, fmt.Sprintf("%d batches to wait for a lock", n), func() bool {
		var waiting int
		err := pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE application_name = $1 AND wait_event_type = 'Lock'`, app).Scan(&waiting)
		return err == nil && waiting >= n
	})
}

// Two replicas' batches that touch the same keys in crossed order — one
// releases k1 and claims k2 while the other releases k2 and claims k1, as
// duplicate deliveries on two replicas do — must not deadlock. A deadlock
// is resolved only after deadlock_timeout (a second by default), during
// which every call of both replicas waits, and then costs a statement per
// call.
func TestCrossedBatchesOfTwoReplicasDoNotDeadlock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	table := testenv.Name(t, "dd")
	testenv.DropTables(t, table)
	pool, app := replicaPool(t)
	// Two stores on one table, as two replicas have; they share a pool
	// only so that one application_name finds their backends.
	a, err := New(pool, Config{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(pool, Config{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	claim := func(s *Store, key string) dedup.Claim {
		c, err := s.Claim(ctx, key, time.Minute)
		if err != nil || c.Result != dedup.Acquired {
			t.Fatalf("Claim(%s) = %+v, %v", key, c, err)
		}
		return c
	}
	k1, k2 := claim(a, "k1"), claim(b, "k2")

	// Another transaction inserts k0 and keeps it uncommitted, so that b's
	// batch, which claims k0 before k1, stops there holding k2.
	tx, err := testenv.PgPool(t).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `INSERT INTO `+pgx.Identifier{table}.Sanitize()+` (key, token, expires_at) VALUES ('k0', 'x', now())`); err != nil {
		t.Fatal(err)
	}
	newCall := func(kind callKind, c dedup.Claim) *call {
		return &call{kind: kind, key: c.Key, token: c.Token, lease: time.Minute.Milliseconds()}
	}
	bCalls := []*call{
		newCall(releaseCall, k2),
		{kind: claimCall, key: "k0", token: "b-k0", lease: time.Minute.Milliseconds()},
		{kind: claimCall, key: "k1", token: "b-k1", lease: time.Minute.Milliseconds()},
	}
	aCalls := []*call{
		newCall(releaseCall, k1),
		{kind: claimCall, key: "k2", token: "a-k2", lease: time.Minute.Milliseconds()},
	}
	var wg sync.WaitGroup
	wg.Go(func() { b.sendBatch(ctx, bCalls) })
	waitForLockWaits(t, pool, app, 1)
	wg.Go(func() { a.sendBatch(ctx, aCalls) })
	waitForLockWaits(t, pool, app, 2)
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()

	if n := a.oneByOne.Load() + b.oneByOne.Load(); n != 0 {
		t.Errorf("%d batches failed (a deadlock) and were sent one by one", n)
	}
	for _, c := range append(aCalls, bCalls...) {
		if c.err != nil {
			t.Errorf("%v of %s: %v", c.kind, c.key, c.err)
		}
	}
	// Whichever batch went first, k0 was free and k2 was released before
	// a's claim of it could run.
	if !bCalls[1].acquired || !aCalls[1].acquired {
		t.Errorf("claims of k0 (%+v) and k2 (%+v) should have acquired", bCalls[1], aCalls[1])
	}
}

// A batch that fails is sent again call by call, but not the claims whose
// callers have stopped waiting: sent, such a claim would take a lease that
// nobody holds, and every delivery of its key would be deferred until the
// lease ran out.
func TestFailedBatchDoesNotResendClaimsOfCallersWhoGaveUp(t *testing.T) {
	t.Parallel()
	s := newBatchStore(t)
	ctx := context.Background()
	// A trigger that refuses the key "poison", once the test lets it: the
	// batch holding it stays in flight until then.
	var lockID int64
	if err := s.pool.QueryRow(ctx, `SELECT hashtextextended($1, 0)`, testenv.Name(t, "lock")).Scan(&lockID); err != nil {
		t.Fatal(err)
	}
	fn := testenv.Name(t, "refuse")
	_, err := s.pool.Exec(ctx, fmt.Sprintf(`
CREATE FUNCTION %[1]s() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF NEW.key = 'poison' THEN
		PERFORM pg_advisory_xact_lock(%[3]d);
		RAISE EXCEPTION 'key poison refused by the test';
	END IF;
	RETURN NEW;
END $$;
CREATE TRIGGER refuse BEFORE INSERT OR UPDATE ON %[2]s FOR EACH ROW EXECUTE FUNCTION %[1]s();`, pgx.Identifier{fn}.Sanitize(), s.table, lockID))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.pool.Exec(context.Background(), `DROP TABLE IF EXISTS `+s.table+`; DROP FUNCTION IF EXISTS `+pgx.Identifier{fn}.Sanitize()+`()`)
	})
	gate, err := s.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer gate.Release()
	if _, err := gate.Exec(ctx, `SELECT pg_advisory_lock($1)`, lockID); err != nil {
		t.Fatal(err)
	}
	unlock := func() {
		if _, err := gate.Exec(ctx, `SELECT pg_advisory_unlock($1)`, lockID); err != nil {
			t.Fatal(err)
		}
	}

	// "gone" and "poison" share a batch, which stops in the trigger.
	release, blocked := s.holdBatch(t)
	defer release()
	poison := s.claimAsync("poison")
	testenv.WaitFor(t, 60*time.Second, "the claim to queue", func() bool { return s.batcher.Waiting() == 1 })
	goneCtx, giveUp := context.WithCancel(ctx)
	defer giveUp()
	gone := make(chan error, 1)
	go func() {
		_, err := s.Claim(goneCtx, "gone", time.Hour)
		gone <- err
	}()
	testenv.WaitFor(t, 60*time.Second, "the claim to queue", func() bool { return s.batcher.Waiting() == 2 })
	release()
	if err := <-blocked; err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 60*time.Second, "the batch to wait in the trigger", func() bool {
		var waiting bool
		err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND wait_event = 'advisory' AND query LIKE '%'||$1||'%')`, strings.Trim(s.table, `"`)).Scan(&waiting)
		return err == nil && waiting
	})

	// Its caller gives up while the batch is in flight, and is answered at
	// once.
	giveUp()
	if err := <-gone; !errors.Is(err, context.Canceled) {
		t.Fatalf("claim whose caller gave up = %v, want context.Canceled", err)
	}
	unlock()
	if r := <-poison; r.err == nil {
		t.Fatalf("claim of poison = %+v, want the trigger's error", r.claim)
	}
	if n := s.oneByOne.Load(); n != 1 {
		t.Fatalf("%d batches sent again one by one, want 1", n)
	}
	// The batch rolled back, and the claim nobody waited for was not sent
	// again: the key is free.
	if c, err := s.Claim(ctx, "gone", time.Minute); err != nil || c.Result != dedup.Acquired {
		t.Fatalf("claim of a key whose only claimer gave up = %+v, %v; want acquired", c, err)
	}
}

// A batch takes an advisory lock per key, in a lock table that every
// session of the server shares: MaxBatch is bounded.
func TestMaxBatchIsBounded(t *testing.T) {
	t.Parallel()
	pool := testenv.PgPool(t)
	if _, err := New(pool, Config{Batching: dedup.Batching{MaxBatch: maxBatchLimit}}); err != nil {
		t.Errorf("New rejected MaxBatch %d: %v", maxBatchLimit, err)
	}
	for _, bad := range []Config{{Batching: dedup.Batching{MaxBatch: maxBatchLimit + 1}}, {Batching: dedup.Batching{MaxBatch: -1}}, {Batching: dedup.Batching{MaxBatchesInFlight: -1}}} {
		if _, err := New(pool, bad); err == nil {
			t.Errorf("New accepted %+v", bad)
		}
	}
}

// A batch at the largest MaxBatch goes out as one: its statements, and
// its advisory locks, fit.
func TestLargestBatchGoesOutWhole(t *testing.T) {
	t.Parallel()
	s := newBatchStore(t)
	calls := make([]*call, maxBatchLimit)
	for i := range calls {
		calls[i] = &call{kind: claimCall, key: fmt.Sprintf("key-%04d-%s", i, strings.Repeat("x", storedkey.MaxLen-20)), token: fmt.Sprintf("t%d", i), lease: time.Minute.Milliseconds()}
	}
	s.sendBatch(context.Background(), calls)
	for _, c := range calls {
		if c.err != nil || !c.acquired {
			t.Fatalf("claim of %.12s…: acquired %v, %v", c.key, c.acquired, c.err)
		}
	}
	if n := s.oneByOne.Load(); n != 0 {
		t.Fatalf("the batch failed and was sent one by one")
	}
}

// A caller that gives up (its StoreTimeout passes) while its claim is in
// a batch in flight must not leave the key leased with nobody to complete
// it: when the batch commits after all, the store gives the lease back,
// and the next delivery of the key acquires it instead of waiting out the
// lease as busy.
func TestClaimOfCallerWhoGaveUpInFlightIsGivenBack(t *testing.T) {
	t.Parallel()
	s := newBatchStore(t)
	ctx := context.Background()
	// A transaction holding "stays" uncommitted stops the next batch in
	// its claim statement, after it has written "gone" (keys in order).
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `INSERT INTO `+s.table+` (key, token, expires_at) VALUES ('stays', 'x', now())`); err != nil {
		t.Fatal(err)
	}
	release, blocked := s.holdBatch(t)
	defer release()
	goneCtx, giveUp := context.WithCancel(ctx)
	defer giveUp()
	gone := make(chan error, 1)
	go func() {
		_, err := s.Claim(goneCtx, "gone", time.Hour)
		gone <- err
	}()
	testenv.WaitFor(t, 10*time.Second, "the claim to queue", func() bool { return s.batcher.Waiting() == 1 })
	stays := s.claimAsync("stays")
	testenv.WaitFor(t, 10*time.Second, "the claim to queue", func() bool { return s.batcher.Waiting() == 2 })
	release()
	if err := <-blocked; err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 10*time.Second, "the batch of gone and stays to wait for the row of stays", func() bool {
		var n int
		err := s.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE '%unnest%' AND query LIKE '%'||$1||'%'`, strings.Trim(s.table, `"`)).Scan(&n)
		return err == nil && n > 0 && s.batcher.Waiting() == 0
	})
	giveUp()
	if err := <-gone; !errors.Is(err, context.Canceled) {
		t.Fatalf("claim whose caller gave up = %v, want context.Canceled", err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if r := <-stays; r.err != nil || r.claim.Result != dedup.Acquired {
		t.Fatalf("claim of stays = %+v, %v; want acquired", r.claim, r.err)
	}
	// The batch committed gone's lease (an hour long) after its caller
	// left; the store releases it.
	testenv.WaitFor(t, 15*time.Second, "the abandoned lease of gone to be given back", func() bool {
		return deduptest.State(t, s, "gone") == dedup.Acquired
	})
	if n := s.abandonedReleased.Load(); n != 1 {
		t.Errorf("%d abandoned claims released, want 1", n)
	}
}
