package testenv

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/warrenmq/warren"
)

// RedisClient returns a client of the test Redis that names its connections
// clientName (CLIENT SETNAME), so [KillRedisClients] can find them, closed
// when t ends. Each call opens an independent client, as a separate replica
// would.
func RedisClient(t testing.TB, clientName string) *redis.Client {
	t.Helper()
	opts, err := redis.ParseURL(RedisURL(t))
	if err != nil {
		t.Fatalf("parse REDIS_URL: %v", err)
	}
	opts.ClientName = clientName
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// DeleteRedisKeys deletes every key that starts with prefix and returns
// how many it deleted. prefix must not contain glob characters (names from
// [Name] do not).
func DeleteRedisKeys(t testing.TB, rdb redis.UniversalClient, prefix string) int {
	t.Helper()
	if strings.ContainsAny(prefix, `*?[]\`) {
		t.Fatalf("DeleteRedisKeys: prefix %q contains glob characters", prefix)
	}
	ctx := context.Background()
	deleted := 0
	iter := rdb.Scan(ctx, 0, prefix+"*", 500).Iterator()
	for iter.Next(ctx) {
		n, err := rdb.Del(ctx, iter.Val()).Result()
		if err != nil {
			t.Fatalf("delete Redis key %q: %v", iter.Val(), err)
		}
		deleted += int(n)
	}
	if err := iter.Err(); err != nil {
		t.Fatalf("scan Redis keys %q: %v", prefix, err)
	}
	return deleted
}

// DeleteRedisKeysOnCleanup deletes every key that starts with prefix when
// t ends.
func DeleteRedisKeysOnCleanup(t testing.TB, prefix string) {
	t.Helper()
	rdb := RedisClient(t, "testenv-cleanup")
	t.Cleanup(func() { DeleteRedisKeys(t, rdb, prefix) }) // runs before rdb's Close: cleanups run last-in first-out
}

// KillRedisClients closes, with CLIENT KILL, every Redis connection named
// clientName, the way a network fault or a Redis restart would, and returns
// how many it closed. Connections of other names — other tests' — are left
// alone.
func KillRedisClients(t testing.TB, clientName string) int {
	t.Helper()
	admin := RedisClient(t, "testenv-admin")
	ctx := context.Background()
	list, err := admin.ClientList(ctx).Result()
	if err != nil {
		t.Fatalf("CLIENT LIST: %v", err)
	}
	killed := 0
	for _, line := range strings.Split(list, "\n") {
		var id, name string
		for _, field := range strings.Fields(line) {
			k, v, _ := strings.Cut(field, "=")
			switch k {
			case "id":
				id = v
			case "name":
				name = v
			}
		}
		if name != clientName || id == "" {
			continue
		}
		n, err := admin.ClientKillByFilter(ctx, "ID", id).Result()
		if err != nil {
			t.Fatalf("CLIENT KILL ID %s: %v", id, err)
		}
		killed += int(n)
	}
	return killed
}

// HandleUntil hands m to h until the outcome is want, for as long as the
// outcome is meanwhile (a retry while a store reconnects, a deferral while
// a lease runs out), and fails t on any other outcome or after 10s.
func HandleUntil(t testing.TB, h warren.Handler, m *warren.Message, want, meanwhile warren.Outcome) {
	t.Helper()
	WaitFor(t, 60*time.Second, "a delivery of "+m.Event.ID+" to be "+want.String(), func() bool {
		err := h.Handle(context.Background(), m)
		switch outcome, _ := warren.Classify(err); outcome {
		case want:
			return true
		case meanwhile:
			return false
		default:
			t.Fatalf("delivery of %s = %v (%v), want %v or %v", m.Event.ID, outcome, err, want, meanwhile)
			return false
		}
	})
}

// BenchSeqAnd16 runs op as sub-benchmarks name/seq, sequentially, and
// name/16g, from 16 goroutines.
func BenchSeqAnd16(b *testing.B, name string, op func() error) {
	b.Run(name+"/seq", func(b *testing.B) {
		for b.Loop() {
			if err := op(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run(name+"/16g", func(b *testing.B) {
		procs := runtime.GOMAXPROCS(0)
		b.SetParallelism((16 + procs - 1) / procs)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := op(); err != nil {
					b.Error(err) // not Fatal: this is not the benchmark's goroutine
					return
				}
			}
		})
	})
}

// RedisBehindProxy returns a client of the test Redis that reaches it
// through a [Proxy], so a test can take the store away (SetUp(false)) or
// stall it without touching the shared server. The client fails fast while
// the store is away: a one-second dial and no retries of its own.
func RedisBehindProxy(t testing.TB) (*redis.Client, *Proxy) {
	t.Helper()
	opts, err := redis.ParseURL(RedisURL(t))
	if err != nil {
		t.Fatalf("parse REDIS_URL: %v", err)
	}
	proxy := StartProxy(t, opts.Addr)
	popts, err := redis.ParseURL(proxy.URL(t, RedisURL(t)))
	if err != nil {
		t.Fatal(err)
	}
	popts.DialTimeout, popts.MaxRetries = time.Second, -1
	rdb := redis.NewClient(popts)
	t.Cleanup(func() { rdb.Close() })
	return rdb, proxy
}
