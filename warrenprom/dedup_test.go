package warrenprom_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warrenmq/warren/dedup"
	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/warrenprom"
)

// txStore stands in for a store that implements dedup.Transactor (as
// dedup/postgres does): Instrument must keep the interface.
type txStore struct{ dedup.Store }

func (txStore) WithinTx(ctx context.Context, _ dedup.Claim, fn func(context.Context) error) error {
	return fn(ctx)
}

func TestInstrumentKeepsTransactor(t *testing.T) {
	dm, err := warrenprom.NewDedupMetrics(prometheus.NewRegistry(), warrenprom.DedupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	plain := dm.Instrument(testenv.MemoryStore(t), "c1")
	if _, ok := plain.(dedup.Transactor); ok {
		t.Error("an instrumented memory store claims to be a Transactor")
	}
	tx := dm.Instrument(txStore{testenv.MemoryStore(t)}, "c2")
	if _, ok := tx.(dedup.Transactor); !ok {
		t.Error("an instrumented Transactor store lost WithinTx")
	}
}

// TestDedupClaimResults drives an instrumented store through each claim
// result and a lost lease.
func TestDedupClaimResults(t *testing.T) {
	reg := prometheus.NewRegistry()
	dm, err := warrenprom.NewDedupMetrics(reg, warrenprom.DedupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	store := dm.Instrument(testenv.MemoryStore(t), "c1")
	ctx := context.Background()
	first, err := store.Claim(ctx, "k1", time.Minute) // acquired
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Claim(ctx, "k1", time.Minute); err != nil { // busy
		t.Fatal(err)
	}
	if err := store.Complete(ctx, first); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Claim(ctx, "k1", time.Minute); err != nil { // done
		t.Fatal(err)
	}
	if _, err := store.Claim(ctx, "", time.Minute); err == nil { // refused: an error
		t.Fatal("an empty key was accepted")
	}
	stale := dedup.Claim{Key: "k1", Token: "not-ours", Result: dedup.Acquired} // k1 is held by first
	if err := store.Complete(ctx, stale); err == nil {
		t.Fatal("completing a claim never made succeeded")
	}
	expect(t, serve(t, reg).scrape(), map[string]float64{
		`warren_dedup_claims_total{consumer="c1",result="acquired"}`:             1,
		`warren_dedup_claims_total{consumer="c1",result="busy"}`:                 1,
		`warren_dedup_claims_total{consumer="c1",result="done"}`:                 1,
		`warren_dedup_store_errors_total{consumer="c1",op="claim"}`:              1,
		`warren_dedup_store_errors_total{consumer="c1",op="complete"}`:           1,
		`warren_dedup_store_duration_seconds_count{consumer="c1",op="claim"}`:    4,
		`warren_dedup_store_duration_seconds_count{consumer="c1",op="complete"}`: 2,
	})
}
