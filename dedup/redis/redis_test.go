package redis_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/dedup"
	"github.com/warrenmq/warren/dedup/deduptest"
	"github.com/warrenmq/warren/dedup/redis"
	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/middleware"
)

// newStore returns a store under a prefix of its own, whose keys are
// deleted when t ends, on a client named clientName.
func newStore(t *testing.T, clientName string, cfg redis.Config) (*redis.Store, *goredis.Client) {
	t.Helper()
	if cfg.Prefix == "" {
		cfg.Prefix = testenv.Name(t, "dd") + ":"
	}
	testenv.DeleteRedisKeysOnCleanup(t, cfg.Prefix)
	rdb := testenv.RedisClient(t, clientName)
	s, err := redis.New(rdb, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s, rdb
}

func TestConformance(t *testing.T) {
	// Serial: its lease and retention subtests need the store to answer
	// within deduptest's 300 ms shortLease and shortRetention.
	deduptest.Run(t, func(t *testing.T, retention time.Duration) dedup.Store {
		s, _ := newStore(t, "dedup-conformance", redis.Config{Retention: retention})
		return s
	})
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	rdb := testenv.RedisClient(t, "dedup-validate")
	for name, cfg := range map[string]redis.Config{
		"brace in prefix":     {Prefix: "app{1}:"},
		"negative retention":  {Retention: -time.Second},
		"sub-ms retention":    {Retention: time.Microsecond},
		"closing brace alone": {Prefix: "app}:"},
		"negative MaxBatch":   {Batching: dedup.Batching{MaxBatch: -1}},
		"negative in flight":  {Batching: dedup.Batching{MaxBatchesInFlight: -1}},
	} {
		if _, err := redis.New(rdb, cfg); err == nil {
			t.Errorf("%s: New accepted %+v", name, cfg)
		}
	}
	if _, err := redis.New(nil, redis.Config{}); err == nil {
		t.Error("New accepted a nil client")
	}
}

// The layout is the contract operators see in redis-cli: the dedup key in a
// hash tag under the prefix, the token while leased, a done value with the
// retention as its time to live once completed.
func TestKeyLayoutAndRetentionByTTL(t *testing.T) {
	t.Parallel()
	const retention = time.Hour
	prefix := testenv.Name(t, "dd") + ":"
	s, rdb := newStore(t, "dedup-layout", redis.Config{Prefix: prefix, Retention: retention})
	ctx := context.Background()

	c, err := s.Claim(ctx, "webhook:evt-1", 30*time.Second)
	if err != nil || c.Result != dedup.Acquired {
		t.Fatalf("Claim = %+v, %v", c, err)
	}
	key := prefix + "{webhook:evt-1}"
	if v, err := rdb.Get(ctx, key).Result(); err != nil || v != c.Token {
		t.Fatalf("leased key %s = %q, %v; want the token %q", key, v, err, c.Token)
	}
	if ttl := rdb.PTTL(ctx, key).Val(); ttl <= 0 || ttl > 30*time.Second {
		t.Errorf("lease TTL = %v, want within the 30s lease", ttl)
	}
	if err := s.Complete(ctx, c); err != nil {
		t.Fatal(err)
	}
	if v := rdb.Get(ctx, key).Val(); v != "done:"+c.Token {
		t.Errorf("done key = %q, want the done value", v)
	}
	if ttl := rdb.PTTL(ctx, key).Val(); ttl <= retention-time.Minute || ttl > retention {
		t.Errorf("done TTL = %v, want about the %v retention", ttl, retention)
	}
}

// A producer's event ID can be any size: a megabyte of ID must not become
// a megabyte of Redis key kept for the retention period. The store keeps
// every key's name bounded — read back with SCAN on the test's prefix — and
// still deduplicates the event; a key at the length limit keeps its
// verbatim form, as keys written before the bound did.
func TestLongEventIDsHaveBoundedKeys(t *testing.T) {
	t.Parallel()
	prefix := testenv.Name(t, "dd") + ":"
	s, rdb := newStore(t, "dedup-long", redis.Config{Prefix: prefix})
	h := &handler{}
	mw := middleware.Dedup(s, middleware.DedupOptions{})
	ctx := context.Background()

	huge := strings.Repeat("x", 1<<20-1) + "!" // 1 MiB
	first, second := mw(h).Handle(ctx, message(huge)), mw(h).Handle(ctx, message(huge))
	if outcome(first) != warren.OutcomeDone || outcome(second) != warren.OutcomeDuplicate || h.count(huge) != 1 {
		t.Fatalf("1 MiB event id delivered twice: %v then %v, ran %d times; want done, duplicate, once", first, second, h.count(huge))
	}
	// Another megabyte that differs in its last byte only is another event.
	other := strings.Repeat("x", 1<<20-1) + "?"
	if o := outcome(mw(h).Handle(ctx, message(other))); o != warren.OutcomeDone || h.count(other) != 1 {
		t.Fatalf("event id differing from a done one in its last byte = %v, ran %d times; want done, once", o, h.count(other))
	}

	// At the limit a key is stored as itself: 512 bytes of dedup key.
	atLimit := strings.Repeat("y", 512)
	c, err := s.Claim(ctx, atLimit, time.Minute)
	if err != nil || c.Result != dedup.Acquired {
		t.Fatalf("Claim of a 512-byte key = %+v, %v", c, err)
	}
	if n := rdb.Exists(ctx, prefix+"{"+atLimit+"}").Val(); n != 1 {
		t.Errorf("a 512-byte key is not stored verbatim under %s{…}; keys at the limit must keep their form", prefix)
	}

	const bound = 128 // of the part inside the hash tag: a digest and its label
	var names []string
	iter := rdb.Scan(ctx, 0, prefix+"*", 100).Iterator()
	for iter.Next(ctx) {
		names = append(names, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	if len(names) != 3 {
		t.Fatalf("found %d keys under %s, want 3 (two long event ids, one key at the limit)", len(names), prefix)
	}
	for _, name := range names {
		inner := strings.TrimSuffix(strings.TrimPrefix(name, prefix+"{"), "}")
		if inner == atLimit {
			continue
		}
		if len(inner) > bound {
			t.Errorf("Redis key of %d bytes (%.40s…) for a long event id; want at most %d inside the hash tag", len(name), name, bound)
		}
	}
}

// handler counts how often the effect of each event ran.
type handler struct {
	mu   sync.Mutex
	runs map[string]int
}

func (h *handler) Handle(_ context.Context, m *warren.Message) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.runs == nil {
		h.runs = map[string]int{}
	}
	h.runs[m.Event.ID]++
	return nil
}

func (h *handler) count(id string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.runs[id]
}

func message(id string) *warren.Message {
	return &warren.Message{Event: warren.Event{ID: id, Type: "workitem.created"}, Consumer: "webhook", Attempt: 1, MaxAttempts: 5}
}

func outcome(err error) warren.Outcome {
	o, _ := warren.Classify(err)
	return o
}

// A Redis restarted without persistence forgets every key. Simulated by
// deleting this test's keys (the shared Redis must not be restarted): the
// middleware keeps working, and what it forgot is handled again — the
// documented at-least-once guarantee — rather than lost.
func TestKeysVanishAsAfterRestartWithoutPersistence(t *testing.T) {
	t.Parallel()
	prefix := testenv.Name(t, "dd") + ":"
	s, rdb := newStore(t, "dedup-vanish", redis.Config{Prefix: prefix})
	var logs bytes.Buffer
	h := &handler{}
	mw := middleware.Dedup(s, middleware.DedupOptions{Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	ctx := context.Background()

	if err := mw(h).Handle(ctx, message("before")); err != nil {
		t.Fatal(err)
	}
	if o := outcome(mw(h).Handle(ctx, message("before"))); o != warren.OutcomeDuplicate {
		t.Fatalf("redelivery before the restart = %v, want duplicate", o)
	}

	// A handler is running when Redis forgets its lease.
	inHandler := warren.HandlerFunc(func(ctx context.Context, m *warren.Message) error {
		if n := testenv.DeleteRedisKeys(t, rdb, prefix); n != 2 {
			t.Errorf("deleted %d keys, want 2 (a done-mark and this handler's lease)", n)
		}
		return h.Handle(ctx, m)
	})
	if err := mw(inHandler).Handle(ctx, message("during")); err != nil {
		t.Fatalf("handler whose lease vanished: %v, want nil (its work is done; acknowledge)", err)
	}
	// Nobody else claimed the key meanwhile, so its done-mark was written
	// all the same, as on a lease that ran out.
	if strings.Contains(logs.String(), "dedup") {
		t.Errorf("completion of a vanished lease nobody took over logged; log:\n%s", logs.String())
	}
	if o := outcome(mw(h).Handle(ctx, message("during"))); o != warren.OutcomeDuplicate {
		t.Errorf("redelivery of the event whose lease vanished = %v, want duplicate", o)
	}

	// After the "restart": the forgotten event runs again (a duplicate the
	// store could not prevent), new events are deduplicated as before.
	if o := outcome(mw(h).Handle(ctx, message("before"))); o != warren.OutcomeDone || h.count("before") != 2 {
		t.Fatalf("forgotten event = %v, ran %d times; want handled again", o, h.count("before"))
	}
	first, second := mw(h).Handle(ctx, message("after")), mw(h).Handle(ctx, message("after"))
	if outcome(first) != warren.OutcomeDone || outcome(second) != warren.OutcomeDuplicate || h.count("after") != 1 {
		t.Errorf("event after the restart: %v then %v, ran %d times; want done, duplicate, once", first, second, h.count("after"))
	}
}

// The client's connections are killed under it (a network fault, a Redis
// restart): no delivery runs the handler unclaimed, and deduplication
// resumes on the reconnected client.
func TestConnectionKilled(t *testing.T) {
	t.Parallel()
	clientName := testenv.Name(t, "cli")
	s, _ := newStore(t, clientName, redis.Config{})
	h := &handler{}
	mw := middleware.Dedup(s, middleware.DedupOptions{})
	ctx := context.Background()
	if err := mw(h).Handle(ctx, message("e1")); err != nil {
		t.Fatal(err)
	}
	if n := testenv.KillRedisClients(t, clientName); n == 0 {
		t.Fatal("no connection named " + clientName + " to kill")
	}
	// Each delivery is either deferred as unavailable (the store could not
	// answer) or answered right; none runs the handler a second time.
	deliver := func(id string, want warren.Outcome) {
		t.Helper()
		testenv.HandleUntil(t, mw(h), message(id), want, warren.OutcomeDeferred)
	}
	deliver("e1", warren.OutcomeDuplicate)
	deliver("e2", warren.OutcomeDone)
	deliver("e2", warren.OutcomeDuplicate)

	// Killed while a handler holds the lease: its completion still lands.
	killing := warren.HandlerFunc(func(ctx context.Context, m *warren.Message) error {
		if n := testenv.KillRedisClients(t, clientName); n == 0 {
			t.Error("the client did not reconnect after the first kill")
		}
		return h.Handle(ctx, m)
	})
	if err := mw(killing).Handle(ctx, message("e3")); err != nil {
		t.Fatalf("delivery killed mid-handler: %v", err)
	}
	deliver("e3", warren.OutcomeDuplicate)
	for _, id := range []string{"e1", "e2", "e3"} {
		if n := h.count(id); n != 1 {
			t.Errorf("%s ran %d times, want once", id, n)
		}
	}
}

// Redis unreachable: the message is deferred without spending an attempt
// and the handler does not run without deduplication, unless FailOpen says
// it should.
func TestStoreDownFailsClosedUnlessFailOpen(t *testing.T) {
	t.Parallel()
	rdb := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: time.Second})
	t.Cleanup(func() { rdb.Close() })
	s, err := redis.New(rdb, redis.Config{})
	if err != nil {
		t.Fatal(err)
	}
	h := &handler{}
	err = middleware.Dedup(s, middleware.DedupOptions{})(h).Handle(context.Background(), message("e"))
	if outcome(err) != warren.OutcomeDeferred || !errors.Is(err, warren.ErrUnavailable) || h.count("e") != 0 {
		t.Fatalf("store down: %v (%v), handler ran %d times; want an Unavailable deferral without running", outcome(err), err, h.count("e"))
	}
	var logs bytes.Buffer
	err = middleware.Dedup(s, middleware.DedupOptions{
		FailOpen: true, Logger: slog.New(slog.NewJSONHandler(&logs, nil)),
	})(h).Handle(context.Background(), message("e"))
	if err != nil || h.count("e") != 1 {
		t.Fatalf("store down with FailOpen: %v, handler ran %d times; want it run once", err, h.count("e"))
	}
	var line struct{ Level, Msg string }
	if err := json.Unmarshal(logs.Bytes(), &line); err != nil || line.Level != "WARN" || !strings.Contains(line.Msg, "without deduplication") {
		t.Errorf("FailOpen log = %q (%v), want one warning that dedup was bypassed", logs.String(), err)
	}
}
