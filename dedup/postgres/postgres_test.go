package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/dedup"
	"github.com/warrenmq/warren/dedup/deduptest"
	"github.com/warrenmq/warren/dedup/postgres"
	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/middleware"
)

// newStore migrates a store on a table of its own, dropped when t ends.
func newStore(t *testing.T, pool *pgxpool.Pool, cfg postgres.Config) *postgres.Store {
	t.Helper()
	if cfg.Table == "" {
		cfg.Table = testenv.Name(t, "dd")
	}
	testenv.DropTables(t, cfg.Table)
	s, err := postgres.New(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestConformance(t *testing.T) {
	// Serial: its lease and retention subtests need the store to answer
	// within deduptest's 300 ms shortLease and shortRetention.
	deduptest.Run(t, func(t *testing.T, retention time.Duration) dedup.Store {
		return newStore(t, testenv.PgPool(t), postgres.Config{Retention: retention})
	})
}

func TestNewValidatesTable(t *testing.T) {
	t.Parallel()
	pool := testenv.PgPool(t)
	for _, bad := range []string{
		`x; DROP TABLE users`, `"quoted"`, `1starts_with_digit`, `a.b.c`, `.x`, `x.`, `has space`, `hyphen-ated`,
		strings.Repeat("x", 49), "schema." + strings.Repeat("x", 64),
	} {
		if _, err := postgres.New(pool, postgres.Config{Table: bad}); err == nil {
			t.Errorf("New accepted table %q", bad)
		}
	}
	for _, good := range []string{"dedup", "public.dedup", "_x9", strings.Repeat("x", 48)} {
		if _, err := postgres.New(pool, postgres.Config{Table: good}); err != nil {
			t.Errorf("New rejected table %q: %v", good, err)
		}
	}
	if _, err := postgres.New(nil, postgres.Config{}); err == nil {
		t.Error("New accepted a nil pool")
	}
	for _, retention := range []time.Duration{-time.Hour, time.Microsecond} {
		if _, err := postgres.New(pool, postgres.Config{Retention: retention}); err == nil {
			t.Errorf("New accepted retention %v", retention)
		}
	}
}

// A schema-qualified table works end to end, and Migrate is idempotent
// even when replicas run it at the same moment.
func TestMigrateConcurrentlyInSchema(t *testing.T) {
	t.Parallel()
	pool := testenv.PgPool(t)
	ctx := context.Background()
	schema := testenv.Name(t, "sch")
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := pool.Exec(context.Background(), "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	s, err := postgres.New(pool, postgres.Config{Table: schema + ".inbox"})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			if err := s.Migrate(ctx); err != nil {
				t.Errorf("concurrent Migrate: %v", err)
			}
		})
	}
	wg.Wait()
	c, err := s.Claim(ctx, "k", time.Minute)
	if err != nil || c.Result != dedup.Acquired {
		t.Fatalf("Claim = %+v, %v", c, err)
	}
}

func TestPurgeDeletesOnlyExpiredRowsInBatches(t *testing.T) {
	t.Parallel()
	pool := testenv.PgPool(t)
	ctx := context.Background()
	table := testenv.Name(t, "dd")
	s := newStore(t, pool, postgres.Config{Table: table, PurgeBatch: 3})
	claim := func(key string) dedup.Claim {
		c, err := s.Claim(ctx, key, time.Minute)
		if err != nil || c.Result != dedup.Acquired {
			t.Fatalf("Claim(%s) = %+v, %v", key, c, err)
		}
		return c
	}
	for i := range 10 { // expired: 5 leases nobody completed, 5 done-marks past retention
		c := claim(fmt.Sprintf("old-%d", i))
		if i%2 == 0 {
			if err := s.Complete(ctx, c); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := pool.Exec(ctx, "UPDATE "+pgx.Identifier{table}.Sanitize()+" SET expires_at = now() - interval '1 second'"); err != nil {
		t.Fatal(err)
	}
	live := claim("live-lease")
	if err := s.Complete(ctx, claim("live-done")); err != nil {
		t.Fatal(err)
	}

	n, err := s.Purge(ctx)
	if err != nil || n != 10 {
		t.Fatalf("Purge = %d, %v; want 10 expired rows deleted", n, err)
	}
	var left int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{table}.Sanitize()).Scan(&left); err != nil || left != 2 {
		t.Fatalf("rows left = %d, %v; want the 2 live ones", left, err)
	}
	for key, want := range map[string]dedup.Result{"live-lease": dedup.Busy, "live-done": dedup.Done, "old-0": dedup.Acquired} {
		if c, err := s.Claim(ctx, key, time.Minute); err != nil || c.Result != want {
			t.Errorf("after purge, Claim(%s) = %v, %v; want %v", key, c.Result, err, want)
		}
	}
	if err := s.Complete(ctx, live); err != nil {
		t.Errorf("the live lease was disturbed by Purge: %v", err)
	}
	if n, err := s.Purge(ctx); err != nil || n != 0 {
		t.Errorf("second Purge = %d, %v; want 0", n, err)
	}
}

// business is a table a transactional handler writes its effect to.
type business struct {
	pool  *pgxpool.Pool
	table string
}

func newBusiness(t *testing.T, pool *pgxpool.Pool) business {
	t.Helper()
	b := business{pool: pool, table: testenv.Name(t, "biz")}
	testenv.DropTables(t, b.table)
	if _, err := pool.Exec(context.Background(), "CREATE TABLE "+pgx.Identifier{b.table}.Sanitize()+" (event_id text NOT NULL, consumer text NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	return b
}

// write records the handler's effect through the dedup transaction.
func (b business) write(ctx context.Context, m *warren.Message) error {
	tx, ok := postgres.Tx(ctx)
	if !ok {
		return errors.New("handler runs outside the dedup transaction")
	}
	_, err := tx.Exec(ctx, "INSERT INTO "+pgx.Identifier{b.table}.Sanitize()+" VALUES ($1, $2)", m.Event.ID, m.Consumer)
	return err
}

func (b business) count(t *testing.T) int {
	t.Helper()
	var n int
	if err := b.pool.QueryRow(context.Background(), "SELECT count(*) FROM "+pgx.Identifier{b.table}.Sanitize()).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func message(id string) *warren.Message {
	return &warren.Message{
		Event:    warren.Event{ID: id, Type: "workitem.updated"},
		Consumer: "automation", Attempt: 1, MaxAttempts: 5,
	}
}

func TestTransactionalCommitsEffectAndMarkTogether(t *testing.T) {
	t.Parallel()
	pool := testenv.PgPool(t)
	s, biz := newStore(t, pool, postgres.Config{}), newBusiness(t, pool)
	h := middleware.Dedup(s, middleware.DedupOptions{Transactional: true})(warren.HandlerFunc(biz.write))
	m := message("evt-1")

	if err := h.Handle(context.Background(), m); err != nil {
		t.Fatalf("first delivery: %v", err)
	}
	if n := biz.count(t); n != 1 {
		t.Fatalf("effect rows = %d, want 1", n)
	}
	if got := deduptest.State(t, s, "automation:evt-1"); got != dedup.Done {
		t.Fatalf("key after commit is %v, want done", got)
	}
	err := h.Handle(context.Background(), m)
	if outcome, _ := warren.Classify(err); outcome != warren.OutcomeDuplicate {
		t.Fatalf("second delivery = %v (%v), want a duplicate", outcome, err)
	}
	if n := biz.count(t); n != 1 {
		t.Fatalf("effect rows after redelivery = %d, want 1", n)
	}
}

func TestTransactionalRollbackLeavesNeither(t *testing.T) {
	t.Parallel()
	pool := testenv.PgPool(t)
	s, biz := newStore(t, pool, postgres.Config{}), newBusiness(t, pool)
	failures := map[string]func() error{
		"error": func() error { return errors.New("downstream unavailable") },
		"panic": func() error { panic("handler bug") },
	}
	for name, fail := range failures {
		t.Run(name, func(t *testing.T) {
			attempts := 0
			h := middleware.Chain(
				middleware.Recover(),
				middleware.Dedup(s, middleware.DedupOptions{Transactional: true}),
			)(warren.HandlerFunc(func(ctx context.Context, m *warren.Message) error {
				attempts++
				if err := biz.write(ctx, m); err != nil {
					return err
				}
				if attempts == 1 {
					return fail()
				}
				return nil
			}))
			m := message("evt-" + name)
			before := biz.count(t)
			err := h.Handle(context.Background(), m)
			if outcome, _ := warren.Classify(err); outcome != warren.OutcomeRetry {
				t.Fatalf("failed attempt = %v (%v), want retry", outcome, err)
			}
			if n := biz.count(t); n != before {
				t.Fatalf("effect rows after rollback = %d, want %d", n, before)
			}
			if got := deduptest.State(t, s, "automation:"+m.Event.ID); got != dedup.Acquired {
				t.Fatalf("key after rollback is %v, want free (acquirable)", got)
			}
			m.Attempt++
			if err := h.Handle(context.Background(), m); err != nil {
				t.Fatalf("retry: %v", err)
			}
			if n := biz.count(t); n != before+1 {
				t.Fatalf("effect rows after retry = %d, want %d", n, before+1)
			}
		})
	}
}

// The process commits the handler's transaction and dies before the ack:
// the broker redelivers to another replica, which must not run the effect
// again.
func TestTransactionalCrashAfterCommitBeforeAck(t *testing.T) {
	t.Parallel()
	biz := newBusiness(t, testenv.PgPool(t))
	table := testenv.Name(t, "dd")
	crashed := newStore(t, testenv.PgPool(t), postgres.Config{Table: table})
	m := message("evt-crash")

	// The dying replica: claim, run the handler in the transaction, commit
	// — and nothing after that (no Complete, no Release, no ack).
	c, err := crashed.Claim(context.Background(), "automation:evt-crash", time.Minute)
	if err != nil || c.Result != dedup.Acquired {
		t.Fatalf("Claim = %+v, %v", c, err)
	}
	if err := crashed.WithinTx(context.Background(), c, func(ctx context.Context) error { return biz.write(ctx, m) }); err != nil {
		t.Fatal(err)
	}

	// The redelivery lands on another replica: its own pool and store.
	other, err := postgres.New(testenv.PgPool(t), postgres.Config{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	ran := false
	h := middleware.Dedup(other, middleware.DedupOptions{Transactional: true})(warren.HandlerFunc(func(ctx context.Context, m *warren.Message) error {
		ran = true
		return biz.write(ctx, m)
	}))
	redelivery := *m
	redelivery.Redelivered = true
	err = h.Handle(context.Background(), &redelivery)
	if outcome, _ := warren.Classify(err); outcome != warren.OutcomeDuplicate || ran {
		t.Fatalf("redelivery = %v (%v), handler ran: %v; want a duplicate without running", outcome, err, ran)
	}
	if n := biz.count(t); n != 1 {
		t.Fatalf("effect rows = %d, want 1", n)
	}
}

// A handler that outlives its lease loses the key to another worker: its
// transaction, effect included, rolls back, and the event's effect still
// happens once.
func TestTransactionalLeaseLostRollsBack(t *testing.T) {
	t.Parallel()
	pool := testenv.PgPool(t)
	s, biz := newStore(t, pool, postgres.Config{}), newBusiness(t, pool)
	const lease = 3 * time.Second // long enough that the duplicate's first try usually lands inside it
	m := message("evt-slow")
	claimStart := time.Now() // the lease ends after claimStart+lease (Postgres's clock is this machine's)

	slowWrote, resume := make(chan struct{}), make(chan struct{})
	slow := middleware.Dedup(s, middleware.DedupOptions{Transactional: true, Lease: lease})(warren.HandlerFunc(func(ctx context.Context, m *warren.Message) error {
		if err := biz.write(ctx, m); err != nil {
			return err
		}
		close(slowWrote)
		<-resume // stalls past its lease
		return nil
	}))
	slowErr := make(chan error, 1)
	go func() { slowErr <- slow.Handle(context.Background(), m) }()
	var resumeOnce sync.Once
	resumeSlow := func() { resumeOnce.Do(func() { close(resume) }) }
	t.Cleanup(func() {
		// Should the test fail early, the slow handler still ends, and its
		// transaction with it, before the tables are dropped.
		resumeSlow()
		<-slowErr
	})
	<-slowWrote

	fast := middleware.Dedup(s, middleware.DedupOptions{Transactional: true, Lease: time.Minute})(warren.HandlerFunc(biz.write))
	var outcomes []warren.Outcome
	var firstDone time.Time
	testenv.WaitFor(t, 60*time.Second, "the duplicate delivery to take the expired lease over", func() bool {
		err := fast.Handle(context.Background(), m)
		outcome, _ := warren.Classify(err)
		if outcomes = append(outcomes, outcome); len(outcomes) == 1 {
			firstDone = time.Now()
		}
		if outcome != warren.OutcomeDone && outcome != warren.OutcomeDeferred {
			t.Fatalf("duplicate delivery = %v (%v)", outcome, err)
		}
		return outcome == warren.OutcomeDone
	})
	resumeSlow()
	err := <-slowErr
	slowErr <- err // for the cleanup
	if !errors.Is(err, dedup.ErrLeaseLost) {
		t.Fatalf("slow handler's delivery = %v, want ErrLeaseLost", err)
	}
	if outcome, _ := warren.Classify(err); outcome != warren.OutcomeRetry {
		t.Errorf("slow handler's delivery classifies as %v, want retry", outcome)
	}
	if n := biz.count(t); n != 1 {
		t.Fatalf("effect rows = %d, want exactly 1 (the slow handler's must have rolled back)", n)
	}
	// Only a first try that ended before the lease could have ended is
	// known to have run inside it; a busy machine may get there later.
	if firstDone.Before(claimStart.Add(lease)) && outcomes[0] != warren.OutcomeDeferred {
		t.Errorf("duplicate delivery during the live lease = %v, want deferred", outcomes[0])
	}
	// The slow delivery's retry is now answered as a duplicate.
	err = slow.Handle(context.Background(), m)
	if outcome, _ := warren.Classify(err); outcome != warren.OutcomeDuplicate {
		t.Errorf("retry of the slow delivery = %v (%v), want duplicate", outcome, err)
	}
}

func TestTxOutsideWithinTx(t *testing.T) {
	t.Parallel()
	if tx, ok := postgres.Tx(context.Background()); ok || tx != nil {
		t.Errorf("Tx outside WithinTx = %v, %v", tx, ok)
	}
}

func TestWithinTxRejectsUnheldClaim(t *testing.T) {
	t.Parallel()
	s := newStore(t, testenv.PgPool(t), postgres.Config{})
	called := false
	err := s.WithinTx(context.Background(), dedup.Claim{Key: "k", Result: dedup.Busy}, func(context.Context) error {
		called = true
		return nil
	})
	if err == nil || called {
		t.Errorf("WithinTx of a busy claim = %v, fn called: %v", err, called)
	}
}

// The store's connections are terminated under it (a failover, a DBA): no
// delivery runs the handler unclaimed, and deduplication resumes once the
// pool reconnects.
func TestConnectionsTerminated(t *testing.T) {
	t.Parallel()
	appName := testenv.Name(t, "app")
	cfg, err := pgxpool.ParseConfig(testenv.DatabaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = appName
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	s := newStore(t, pool, postgres.Config{})
	runs := map[string]int{}
	h := middleware.Dedup(s, middleware.DedupOptions{})(warren.HandlerFunc(func(_ context.Context, m *warren.Message) error {
		runs[m.Event.ID]++
		return nil
	}))
	if err := h.Handle(context.Background(), message("e1")); err != nil {
		t.Fatal(err)
	}
	if n := testenv.TerminateBackends(t, appName); n == 0 {
		t.Fatal("no backend to terminate")
	}
	// Each delivery is deferred as unavailable while the pool reconnects, or is
	// answered right; none runs the handler a second time.
	testenv.HandleUntil(t, h, message("e1"), warren.OutcomeDuplicate, warren.OutcomeDeferred)
	testenv.HandleUntil(t, h, message("e2"), warren.OutcomeDone, warren.OutcomeDeferred)
	testenv.HandleUntil(t, h, message("e2"), warren.OutcomeDuplicate, warren.OutcomeDeferred)
	if runs["e1"] != 1 || runs["e2"] != 1 {
		t.Errorf("runs = %v, want each event once", runs)
	}
}
