package deduptest

import (
	"context"
	"crypto/rand"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warrenmq/warren/dedup"
)

// NewStore returns a store for one subtest whose completed keys stay done
// for retention. It should register the removal of whatever it creates
// (tables, keys) with t.Cleanup. Run uses keys no other run uses, so the
// stores may share a backend.
type NewStore func(t *testing.T, retention time.Duration) dedup.Store

// Timing of the subtests that wait for a lease or a retention to end: long
// enough that a loaded machine answers the first claim within it, short
// enough to keep the suite fast.
const (
	shortLease     = 300 * time.Millisecond
	shortRetention = 300 * time.Millisecond
	longLease      = time.Minute
	longRetention  = time.Hour
	waitLimit      = 15 * time.Second
)

// Run checks the store newStore makes against the [dedup.Store] contract,
// one subtest per rule. Subtests that wait for a lease to expire assume the
// store's clock runs at the test's pace.
func Run(t *testing.T, newStore NewStore) {
	t.Helper()
	tests := []struct {
		name string
		run  func(t *testing.T, newStore NewStore)
	}{
		{"AcquireThenBusy", testAcquireThenBusy},
		{"CompleteThenDone", testCompleteThenDone},
		{"ReleaseFreesKey", testReleaseFreesKey},
		{"ExpiredLeaseIsTakenOver", testExpiredLeaseIsTakenOver},
		{"ExpiredLeaseNobodyTookCompletes", testExpiredLeaseNobodyTookCompletes},
		{"ExpiredLeasePurgedCompletes", testExpiredLeasePurgedCompletes},
		{"ExpiredTakeoverCompletes", testExpiredTakeoverCompletes},
		{"CompleteAfterOwnRelease", testCompleteAfterOwnRelease},
		{"RetentionEnds", testRetentionEnds},
		{"ConcurrentClaimsAcquireOnce", testConcurrentClaims},
		{"KeysAreIndependent", testKeysAreIndependent},
		{"LongKeysAreIndependent", testLongKeysAreIndependent},
		{"BadInput", testBadInput},
		{"CancelledContext", testCancelledContext},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, newStore) })
	}
}

func testAcquireThenBusy(t *testing.T, newStore NewStore) {
	s, ctx, key := newStore(t, longRetention), context.Background(), uniqueKey(t)
	c := mustClaim(t, s, key, longLease, dedup.Acquired)
	if c.Key != key || c.Token == "" {
		t.Errorf("acquired claim = %+v, want Key %q and a token", c, key)
	}
	busy := mustClaim(t, s, key, longLease, dedup.Busy)
	if busy.Token != "" {
		t.Errorf("busy claim carries token %q; only an acquired claim may", busy.Token)
	}
	if err := s.Complete(ctx, busy); err == nil {
		t.Error("Complete of a busy claim succeeded; it holds no lease")
	}
	mustClaim(t, s, key, longLease, dedup.Busy) // the failed Complete changed nothing
}

func testCompleteThenDone(t *testing.T, newStore NewStore) {
	s, ctx, key := newStore(t, longRetention), context.Background(), uniqueKey(t)
	c := mustClaim(t, s, key, longLease, dedup.Acquired)
	if err := s.Complete(ctx, c); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	done := mustClaim(t, s, key, longLease, dedup.Done)
	if done.Token != "" {
		t.Errorf("done claim carries token %q", done.Token)
	}
	if err := s.Complete(ctx, c); err != nil {
		t.Errorf("Complete of an already completed claim: %v, want nil (a retried call must succeed)", err)
	}
	if err := s.Release(ctx, c); err != nil {
		t.Errorf("Release after Complete: %v, want nil", err)
	}
	mustClaim(t, s, key, longLease, dedup.Done) // Release never undoes a Complete
}

func testReleaseFreesKey(t *testing.T, newStore NewStore) {
	s, ctx, key := newStore(t, longRetention), context.Background(), uniqueKey(t)
	first := mustClaim(t, s, key, longLease, dedup.Acquired)
	if err := s.Release(ctx, first); err != nil {
		t.Fatalf("Release: %v", err)
	}
	second := mustClaim(t, s, key, longLease, dedup.Acquired)
	if second.Token == first.Token {
		t.Fatalf("two claims got the same token %q", first.Token)
	}
	// The first claim no longer holds the key: releasing it again must not
	// free the second claim's lease, and completing it must fail.
	if err := s.Release(ctx, first); err != nil {
		t.Errorf("Release of a claim that lost the key: %v, want nil", err)
	}
	mustClaim(t, s, key, longLease, dedup.Busy)
	if err := s.Complete(ctx, first); !errors.Is(err, dedup.ErrLeaseLost) {
		t.Errorf("Complete of a released claim = %v, want ErrLeaseLost", err)
	}
	mustClaim(t, s, key, longLease, dedup.Busy)
	if err := s.Complete(ctx, second); err != nil {
		t.Fatalf("Complete of the holding claim: %v", err)
	}
	mustClaim(t, s, key, longLease, dedup.Done)
}

func testExpiredLeaseIsTakenOver(t *testing.T, newStore NewStore) {
	s, ctx, key := newStore(t, longRetention), context.Background(), uniqueKey(t)
	start := time.Now()
	dead := mustClaim(t, s, key, shortLease, dedup.Acquired) // a claimer that dies: never completes or releases
	taken := claimUntilAcquired(t, s, key, longLease)
	if elapsed := time.Since(start); elapsed < shortLease {
		t.Errorf("lease of %v taken over after %v", shortLease, elapsed)
	}
	if err := s.Complete(ctx, dead); !errors.Is(err, dedup.ErrLeaseLost) {
		t.Errorf("Complete by the claimer whose lease was taken over = %v, want ErrLeaseLost", err)
	}
	if err := s.Release(ctx, dead); err != nil {
		t.Errorf("Release by the claimer whose lease was taken over: %v, want nil", err)
	}
	mustClaim(t, s, key, longLease, dedup.Busy) // the new lease survived both
	if err := s.Complete(ctx, taken); err != nil {
		t.Fatalf("Complete by the new holder: %v", err)
	}
	mustClaim(t, s, key, longLease, dedup.Done)
}

// A lease that ran out while nobody else claimed its key still completes:
// the claim was never contradicted, so its done-mark is written rather than
// lost (a slow handler's event would otherwise be handled again on its
// next delivery, though no other worker ever touched it).
func testExpiredLeaseNobodyTookCompletes(t *testing.T, newStore NewStore) {
	s, ctx, key := newStore(t, longRetention), context.Background(), uniqueKey(t)
	slow := mustClaim(t, s, key, shortLease, dedup.Acquired)
	waitExpired(t, s, key)
	if err := s.Complete(ctx, slow); err != nil {
		t.Fatalf("Complete of an expired lease nobody took over = %v, want nil", err)
	}
	if err := s.Complete(ctx, slow); err != nil {
		t.Errorf("Complete of it again = %v, want nil (a retried call must succeed)", err)
	}
	mustClaim(t, s, key, longLease, dedup.Done)
}

// Purger is implemented by stores that delete expired keys on request
// (dedup/postgres's Purge). Run calls it where the contract says a purge
// changes nothing; stores that expire keys by themselves (Redis) or sweep
// them (memory) are checked the same way without it.
type Purger interface {
	Purge(ctx context.Context) (int64, error)
}

// A lease that ran out and was then purged (or swept, or expired by the
// server) still completes, as one that was not: an expired key means the
// same as no key.
func testExpiredLeasePurgedCompletes(t *testing.T, newStore NewStore) {
	s, ctx, key := newStore(t, longRetention), context.Background(), uniqueKey(t)
	slow := mustClaim(t, s, key, shortLease, dedup.Acquired)
	waitExpired(t, s, key)
	if p, ok := s.(Purger); ok {
		if _, err := p.Purge(ctx); err != nil {
			t.Fatalf("Purge: %v", err)
		}
	}
	if err := s.Complete(ctx, slow); err != nil {
		t.Fatalf("Complete of an expired, purged lease nobody took over = %v, want nil", err)
	}
	mustClaim(t, s, key, longLease, dedup.Done)
}

// A claim whose lease was taken over completes once the lease that took it
// over has run out in turn: nobody holds the key then. The claim that took
// it over then finds the first claim's done-mark, and has lost.
func testExpiredTakeoverCompletes(t *testing.T, newStore NewStore) {
	s, ctx, key := newStore(t, longRetention), context.Background(), uniqueKey(t)
	first := mustClaim(t, s, key, shortLease, dedup.Acquired)
	second := claimUntilAcquired(t, s, key, shortLease)
	waitExpired(t, s, key)
	if err := s.Complete(ctx, first); err != nil {
		t.Fatalf("Complete once the lease that took the key over has run out = %v, want nil", err)
	}
	mustClaim(t, s, key, longLease, dedup.Done)
	if err := s.Complete(ctx, second); !errors.Is(err, dedup.ErrLeaseLost) {
		t.Errorf("Complete by the expired taker against the first claim's done-mark = %v, want ErrLeaseLost", err)
	}
	mustClaim(t, s, key, longLease, dedup.Done)
}

// A claim completed after its own release writes its mark, as long as no
// other claim took the key meanwhile: the release left the key to nobody.
func testCompleteAfterOwnRelease(t *testing.T, newStore NewStore) {
	s, ctx, key := newStore(t, longRetention), context.Background(), uniqueKey(t)
	c := mustClaim(t, s, key, longLease, dedup.Acquired)
	if err := s.Release(ctx, c); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if err := s.Complete(ctx, c); err != nil {
		t.Fatalf("Complete after the claim's own release = %v, want nil", err)
	}
	mustClaim(t, s, key, longLease, dedup.Done)
}

// waitExpired returns once the lease of shortLease last claimed on key has
// run out: a probe claimed after it with the same lease expires no earlier,
// so once the probe can be taken over, the store holds key's lease expired
// too. Claiming key itself would take it.
func waitExpired(t *testing.T, s dedup.Store, key string) {
	t.Helper()
	probe := key + ":probe:" + rand.Text()
	mustClaim(t, s, probe, shortLease, dedup.Acquired)
	claimUntilAcquired(t, s, probe, longLease)
}

func testRetentionEnds(t *testing.T, newStore NewStore) {
	s, ctx, key := newStore(t, shortRetention), context.Background(), uniqueKey(t)
	c := mustClaim(t, s, key, longLease, dedup.Acquired)
	completed := time.Now()
	if err := s.Complete(ctx, c); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	mustClaim(t, s, key, longLease, dedup.Done)
	claimUntilAcquired(t, s, key, longLease)
	if elapsed := time.Since(completed); elapsed < shortRetention {
		t.Errorf("retention of %v ended after %v", shortRetention, elapsed)
	}
}

func testConcurrentClaims(t *testing.T, newStore NewStore) {
	s, ctx, key := newStore(t, longRetention), context.Background(), uniqueKey(t)
	const claimers = 50
	claimAll := func() map[dedup.Result][]dedup.Claim {
		var (
			wg      sync.WaitGroup
			mu      sync.Mutex
			results = map[dedup.Result][]dedup.Claim{}
			start   = make(chan struct{})
		)
		for range claimers {
			wg.Go(func() {
				<-start
				c, err := s.Claim(ctx, key, longLease)
				if err != nil {
					t.Errorf("Claim: %v", err)
					return
				}
				mu.Lock()
				results[c.Result] = append(results[c.Result], c)
				mu.Unlock()
			})
		}
		close(start) // release all claimers at once
		wg.Wait()
		return results
	}
	results := claimAll()
	if len(results[dedup.Acquired]) != 1 || len(results[dedup.Busy]) != claimers-1 {
		t.Fatalf("%d concurrent claims: %d acquired, %d busy, %d done; want 1 acquired and the rest busy",
			claimers, len(results[dedup.Acquired]), len(results[dedup.Busy]), len(results[dedup.Done]))
	}
	if err := s.Complete(ctx, results[dedup.Acquired][0]); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if again := claimAll(); len(again[dedup.Done]) != claimers {
		t.Errorf("%d concurrent claims of a done key: %d done, want all", claimers, len(again[dedup.Done]))
	}
}

// Keys are opaque: two that share a suffix (the same event under two
// consumer names) are independent, and any string a key function may
// produce from an event ID — which comes from outside — is a valid key.
func testKeysAreIndependent(t *testing.T, newStore NewStore) {
	s, ctx, base := newStore(t, longRetention), context.Background(), uniqueKey(t)
	a := mustClaim(t, s, "webhook:"+base, longLease, dedup.Acquired)
	mustClaim(t, s, "automation:"+base, longLease, dedup.Acquired)
	if err := s.Complete(ctx, a); err != nil {
		t.Fatal(err)
	}
	mustClaim(t, s, "webhook:"+base, longLease, dedup.Done)
	mustClaim(t, s, "automation:"+base, longLease, dedup.Busy)

	for _, odd := range []string{
		"{braces}:" + base,
		`quote'"` + base,
		"space and\ttab " + base,
		"ünïcødé✓" + base,
		"*?[glob]" + base,
		strings.Repeat("long", 128) + base,
		hugeKey() + base, // event IDs come from outside
		"nul\x00byte" + base,
		"invalid utf-8 \xff\xfe" + base,
	} {
		c := mustClaim(t, s, odd, longLease, dedup.Acquired)
		if err := s.Complete(ctx, c); err != nil {
			t.Errorf("Complete(%q): %v", odd, err)
		}
		mustClaim(t, s, odd, longLease, dedup.Done)
	}
}

// Long keys are independent down to their last byte. A store may keep a
// long key in a bounded form (dedup/redis and dedup/postgres keep keys
// over 512 bytes as a digest), but never in one that two keys share: a
// prefix cut off at some length would make every event whose ID starts
// the same a duplicate of the first.
func testLongKeysAreIndependent(t *testing.T, newStore NewStore) {
	s, ctx, base := newStore(t, longRetention), context.Background(), uniqueKey(t)
	long := base + strings.Repeat("x", 1<<20) // 1 MiB, as an event ID from outside may be
	short := rand.Text()                      // unique, and shorter than any limit
	keys := []string{
		long + "a",
		long + "b",
		long, // a prefix of the two above
		short + strings.Repeat("x", 512-len(short)),
		short + strings.Repeat("x", 513-len(short)), // the same, one byte longer
	}
	claims := make([]dedup.Claim, len(keys))
	for i, k := range keys {
		claims[i] = mustClaim(t, s, k, longLease, dedup.Acquired)
	}
	for i, k := range keys {
		if i%2 == 0 {
			if err := s.Complete(ctx, claims[i]); err != nil {
				t.Fatalf("Complete(%d-byte key): %v", len(k), err)
			}
		}
	}
	for i, k := range keys {
		want := dedup.Busy
		if i%2 == 0 {
			want = dedup.Done
		}
		mustClaim(t, s, k, longLease, want)
	}
}

func testBadInput(t *testing.T, newStore NewStore) {
	s, ctx, key := newStore(t, longRetention), context.Background(), uniqueKey(t)
	if _, err := s.Claim(ctx, "", longLease); err == nil {
		t.Error("Claim of an empty key succeeded")
	}
	for _, lease := range []time.Duration{0, -time.Second} {
		if _, err := s.Claim(ctx, key, lease); err == nil {
			t.Errorf("Claim with lease %v succeeded", lease)
		}
	}
	if err := s.Complete(ctx, dedup.Claim{}); err == nil {
		t.Error("Complete of a zero Claim succeeded")
	}
	if err := s.Release(ctx, dedup.Claim{}); err == nil {
		t.Error("Release of a zero Claim succeeded")
	}
	// A forged token holds nothing.
	held := mustClaim(t, s, key, longLease, dedup.Acquired)
	forged := dedup.Claim{Key: key, Token: "forged", Result: dedup.Acquired}
	if err := s.Complete(ctx, forged); !errors.Is(err, dedup.ErrLeaseLost) {
		t.Errorf("Complete with a forged token = %v, want ErrLeaseLost", err)
	}
	if err := s.Release(ctx, forged); err != nil {
		t.Errorf("Release with a forged token: %v, want nil", err)
	}
	mustClaim(t, s, key, longLease, dedup.Busy)
	if err := s.Complete(ctx, held); err != nil {
		t.Errorf("Complete of the held claim after forged calls: %v", err)
	}
}

func testCancelledContext(t *testing.T, newStore NewStore) {
	s, key := newStore(t, longRetention), uniqueKey(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if c, err := s.Claim(ctx, key, longLease); err == nil {
		t.Fatalf("Claim with a cancelled context = %+v, want an error", c)
	}
	c := mustClaim(t, s, key, longLease, dedup.Acquired) // the failed claim took nothing
	if err := s.Complete(ctx, c); err == nil {
		t.Error("Complete with a cancelled context succeeded")
	}
	if err := s.Complete(context.Background(), c); err != nil {
		t.Errorf("Complete: %v", err)
	}
}

// hugeKey is 10 kB of random text, which no compression shrinks into a
// database index entry.
func hugeKey() string {
	var b strings.Builder
	for b.Len() < 10_000 {
		b.WriteString(rand.Text())
	}
	return b.String()
}

func mustClaim(t *testing.T, s dedup.Store, key string, lease time.Duration, want dedup.Result) dedup.Claim {
	t.Helper()
	c, err := s.Claim(context.Background(), key, lease)
	if err != nil {
		t.Fatalf("Claim(%.80q): %v", key, err)
	}
	if c.Result != want {
		t.Fatalf("Claim(%.80q) = %v, want %v", key, c.Result, want)
	}
	return c
}

// claimUntilAcquired claims key until a claim is acquired, which it must
// be once a lease or a retention ends. Each failed claim is Busy or Done
// and changes nothing, so polling is safe.
func claimUntilAcquired(t *testing.T, s dedup.Store, key string, lease time.Duration) dedup.Claim {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for {
		c, err := s.Claim(context.Background(), key, lease)
		if err != nil {
			t.Fatalf("Claim(%.80q): %v", key, err)
		}
		if c.Result == dedup.Acquired {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("Claim(%.80q) still %v after %v", key, c.Result, waitLimit)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// uniqueKey is a key no other test or run uses.
func uniqueKey(t *testing.T) string {
	return "deduptest:" + t.Name() + ":" + rand.Text()
}

// State reports what a claim of key finds in s now — [dedup.Acquired] for a
// free key, [dedup.Done] or [dedup.Busy] — and releases the claim it took,
// so looking changes nothing. It is for tests of handlers behind the Dedup
// middleware that check what a delivery left behind.
func State(t testing.TB, s dedup.Store, key string) dedup.Result {
	t.Helper()
	c, err := s.Claim(context.Background(), key, longLease)
	if err != nil {
		t.Fatalf("Claim(%.80q): %v", key, err)
	}
	if c.Result == dedup.Acquired {
		if err := s.Release(context.Background(), c); err != nil {
			t.Fatalf("Release(%q): %v", key, err)
		}
	}
	return c.Result
}
