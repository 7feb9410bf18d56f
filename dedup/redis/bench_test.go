package redis_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"testing"
	"time"

	"github.com/warrenmq/warren/dedup"
	"github.com/warrenmq/warren/dedup/redis"
	"github.com/warrenmq/warren/internal/testenv"
)

// The per-message cost of deduplication: the store's Claim + Complete (two
// round trips, each a script) against the floor, one bare SET NX PX, each
// on a fresh key, sequentially and from 16 goroutines. Run with
//
//	go test -run '^$' -bench . -benchtime 3000x ./dedup/redis/
func BenchmarkDedup(b *testing.B) {
	prefix := testenv.Name(b, "bench") + ":"
	testenv.DeleteRedisKeysOnCleanup(b, prefix)
	rdb := testenv.RedisClient(b, "dedup-bench")
	store, err := redis.New(rdb, redis.Config{Prefix: prefix})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	testenv.BenchSeqAnd16(b, "ClaimComplete", func() error {
		c, err := store.Claim(ctx, rand.Text(), time.Minute)
		if err != nil || c.Result != dedup.Acquired {
			return fmt.Errorf("Claim = %+v, %v", c, err)
		}
		return store.Complete(ctx, c)
	})
	testenv.BenchSeqAnd16(b, "BareSetNX", func() error {
		return rdb.SetNX(ctx, prefix+"{"+rand.Text()+"}", "x", time.Minute).Err()
	})
}
