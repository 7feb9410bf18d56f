package redis

import (
	"context"
	"crypto/rand"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/warrenmq/warren/dedup"
	"github.com/warrenmq/warren/dedup/deduptest"
	"github.com/warrenmq/warren/internal/testenv"
)

// pipelineRecorder is a go-redis hook that records the commands of every
// pipeline of scripts and can hold the first one until released. (go-redis
// sends other pipelines of its own, to set a connection up.)
type pipelineRecorder struct {
	mu        sync.Mutex
	pipelines [][]string // command names (and first key) of each pipeline
	hold      chan struct{}
	held      chan struct{} // closed when the first pipeline is being held
	once      sync.Once
}

func (r *pipelineRecorder) DialHook(next goredis.DialHook) goredis.DialHook { return next }
func (r *pipelineRecorder) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return next
}

func (r *pipelineRecorder) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		names := make([]string, len(cmds))
		for i, c := range cmds {
			names[i] = c.Name()
		}
		if names[0] != "evalsha" && names[0] != "eval" {
			return next(ctx, cmds)
		}
		r.mu.Lock()
		r.pipelines = append(r.pipelines, names)
		first := len(r.pipelines) == 1
		r.mu.Unlock()
		if first && r.hold != nil {
			r.once.Do(func() { close(r.held) })
			<-r.hold
		}
		return next(ctx, cmds)
	}
}

func (r *pipelineRecorder) recorded() [][]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([][]string(nil), r.pipelines...)
}

// newRecordedStore returns a store with one pipeline in flight at a time,
// under a prefix of its own, on a client that rec watches.
// claimTogether holds the store's only pipeline with a lone first claim,
// queues a claim of each key behind it and then lets them all go, so
// that the keys' claims share the next pipeline. It returns each key's
// result, in order.
func claimTogether(t *testing.T, s *Store, rec *pipelineRecorder, keys []string) []claimResult {
	t.Helper()
	ctx := context.Background()
	first := make(chan error, 1)
	go func() {
		_, err := s.Claim(ctx, "first", time.Minute)
		first <- err
	}()
	<-rec.held
	results := make([]chan claimResult, len(keys))
	for i, k := range keys {
		results[i] = make(chan claimResult, 1)
		go func() {
			c, err := s.Claim(ctx, k, time.Minute)
			results[i] <- claimResult{c, err}
		}()
		testenv.WaitFor(t, 60*time.Second, "the claim to queue", func() bool { return s.batcher.Waiting() == i+1 })
	}
	close(rec.hold)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	out := make([]claimResult, len(keys))
	for i, ch := range results {
		out[i] = <-ch
	}
	return out
}

func newRecordedStore(t *testing.T, rec *pipelineRecorder) (*Store, *goredis.Client, string) {
	t.Helper()
	prefix := testenv.Name(t, "dd") + ":"
	testenv.DeleteRedisKeysOnCleanup(t, prefix)
	rdb := testenv.RedisClient(t, "dedup-batch")
	rdb.AddHook(rec)
	s, err := New(rdb, Config{Prefix: prefix, Batching: dedup.Batching{MaxBatchesInFlight: 1}})
	if err != nil {
		t.Fatal(err)
	}
	return s, rdb, prefix
}

type claimResult struct {
	claim dedup.Claim
	err   error
}

// Claims made while a pipeline is in flight go out together in the next
// one, and a key whose script fails — here the key holds a hash, so GET
// answers WRONGTYPE — fails its own claim only.
func TestOneKeysErrorFailsOnlyItsOwnClaim(t *testing.T) {
	t.Parallel()
	rec := &pipelineRecorder{hold: make(chan struct{}), held: make(chan struct{})}
	s, rdb, prefix := newRecordedStore(t, rec)
	ctx := context.Background()
	if err := rdb.HSet(ctx, prefix+"{poison}", "field", "value").Err(); err != nil {
		t.Fatal(err)
	}
	keys := []string{"k1", "k2", "poison", "k3", "k4", "k5"}
	results := claimTogether(t, s, rec, keys)
	for i, k := range keys {
		r := results[i]
		if k == "poison" {
			if r.err == nil || !strings.Contains(r.err.Error(), "WRONGTYPE") {
				t.Errorf("claim of a key holding a hash = %+v, %v; want WRONGTYPE", r.claim, r.err)
			}
			continue
		}
		if r.err != nil || r.claim.Result != dedup.Acquired {
			t.Errorf("claim of %s = %+v, %v; want acquired despite the failing key in its pipeline", k, r.claim, r.err)
			continue
		}
		if err := s.Complete(ctx, r.claim); err != nil {
			t.Errorf("complete %s: %v", k, err)
		}
	}
	if p := rec.recorded(); len(p) < 2 || len(p[1]) != len(keys) {
		t.Errorf("pipelines %v; want the %d queued claims in the second one", p, len(keys))
	}
}

// A script Redis does not hold (its cache flushed, or a new server) is
// answered NOSCRIPT without running; the store sends its source then and
// the call runs once.
func TestScriptMissingFromTheServersCache(t *testing.T) {
	t.Parallel()
	rec := &pipelineRecorder{}
	s, rdb, prefix := newRecordedStore(t, rec)
	ctx := context.Background()
	// A script of its own, which no one has loaded: its hash is new.
	script := goredis.NewScript("-- " + rand.Text() + "\nreturn redis.call('INCR', KEYS[1])")
	key := prefix + "{counter}"
	got, err := s.run(ctx, script, key)
	if err != nil || got != 1 {
		t.Fatalf("run = %d, %v; want 1", got, err)
	}
	if v, err := rdb.Get(ctx, key).Int(); err != nil || v != 1 {
		t.Fatalf("counter = %d, %v; the script must have run exactly once", v, err)
	}
	p := rec.recorded()
	if len(p) != 2 || p[0][0] != "evalsha" || p[1][0] != "eval" {
		t.Fatalf("pipelines %v; want evalsha answered NOSCRIPT, then eval", p)
	}
	if got, err := s.run(ctx, script, key); err != nil || got != 2 {
		t.Fatalf("second run = %d, %v; want 2", got, err)
	}
	if p := rec.recorded(); len(p) != 3 || p[2][0] != "evalsha" {
		t.Fatalf("pipelines %v; once sent, the script is cached and evalsha suffices", p)
	}
}

// With batching off every call is a pipeline of one; the store keeps its
// contract either way.
func TestConformanceUnbatched(t *testing.T) {
	// Serial: its lease and retention subtests need the store to answer
	// within deduptest's 300 ms shortLease and shortRetention.
	deduptest.Run(t, func(t *testing.T, retention time.Duration) dedup.Store {
		prefix := testenv.Name(t, "dd") + ":"
		testenv.DeleteRedisKeysOnCleanup(t, prefix)
		s, err := New(testenv.RedisClient(t, "dedup-unbatched"), Config{Prefix: prefix, Retention: retention, Batching: dedup.Batching{MaxBatch: 1}})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}
