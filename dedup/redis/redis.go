package redis

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/warrenmq/warren/dedup"
	"github.com/warrenmq/warren/dedup/internal/coalesce"
	"github.com/warrenmq/warren/dedup/internal/storedkey"
)

// Config configures a [Store]. The zero value is ready to use.
type Config struct {
	// Prefix starts every key the store writes, so several stores can
	// share a Redis database. It must not contain '{' or '}': the store
	// puts the dedup key in a hash tag of its own. Default "warren:dedup:".
	Prefix string

	// Retention is how long a completed key stays done. Default 7 days.
	Retention time.Duration

	// Batching: a batch is one pipeline, each call in it still its own
	// atomic script. Default MaxBatch 128, MaxBatchesInFlight 2.
	dedup.Batching
}

// Defaults of [Config].
const (
	DefaultPrefix             = "warren:dedup:"
	DefaultRetention          = 7 * 24 * time.Hour
	DefaultMaxBatch           = 128
	DefaultMaxBatchesInFlight = 2
)

// Store is a [dedup.Store] on Redis. It is safe for concurrent use.
type Store struct {
	client    goredis.UniversalClient
	prefix    string
	retention time.Duration
	batcher   *coalesce.Batcher[*scriptCall] // nil when batching is off
}

var _ dedup.Store = (*Store)(nil)

// New returns a store on client. It does no I/O.
func New(client goredis.UniversalClient, cfg Config) (*Store, error) {
	if client == nil {
		return nil, errors.New("dedup/redis: nil client")
	}
	cfg.Prefix = cmp.Or(cfg.Prefix, DefaultPrefix)
	if strings.ContainsAny(cfg.Prefix, "{}") {
		return nil, fmt.Errorf("dedup/redis: prefix %q contains a brace; the hash tag is the store's", cfg.Prefix)
	}
	if cfg.Retention < 0 {
		return nil, fmt.Errorf("dedup/redis: negative Retention (%v)", cfg.Retention)
	}
	cfg.Retention = cmp.Or(cfg.Retention, DefaultRetention)
	if cfg.Retention < time.Millisecond {
		return nil, fmt.Errorf("dedup/redis: retention %v is below Redis's 1ms resolution", cfg.Retention)
	}
	batching, err := coalesce.Configure("dedup/redis", cfg.Batching, dedup.Batching{MaxBatch: DefaultMaxBatch, MaxBatchesInFlight: DefaultMaxBatchesInFlight}, 0)
	if err != nil {
		return nil, err
	}
	s := &Store{client: client, prefix: cfg.Prefix, retention: cfg.Retention}
	if s.batcher = coalesce.NewFor(batching, s.sendPipeline); s.batcher != nil {
		s.batcher.Abandoned = coalesce.Undo(s.sendPipeline, releaseOfAbandoned)
	}
	return s, nil
}

// Results of claimScript.
const (
	claimAcquired = 1
	claimDone     = 2
	claimBusy     = 3
)

// claimScript is SET NX PX and, when the key exists, a look at what holds
// it, in one round trip and atomically: a GET sent separately could find
// the key released or expired in between and misreport it. (SET … NX GET
// does the same natively but needs Redis 7.)
//
// A key that already holds this claim's token was taken by this very call:
// go-redis sends a script again when its reply was lost, and the first run
// may have set the key. Answering busy then would leave a lease nobody
// holds, deferring every delivery until it expired. Tokens are random and
// made per call, so no other claimer can present one.
var claimScript = goredis.NewScript(`
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
	return 1
end
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
	return 1
end
if v and string.sub(v, 1, 5) == 'done:' then
	return 2
end
return 3
`)

// completeScript turns the claim's lease into a done-mark, "done:<token>",
// if the key still holds the claim's token, or holds nothing: a lease that
// ran out (the claim's or one that took the key over) has left Redis, as
// has one the claim released, and while no other claimer holds the key the
// claim was never contradicted, so its done-mark is written as every store
// writes it (dedup.Store's Complete). A key that already
// holds this claim's done-mark counts as completed, so a retried call
// succeeds. Only another claim's lease or done-mark fails it. Tokens are
// base32 (A–Z, 2–7), so no lease looks like a done-mark.
var completeScript = goredis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] or not v then
	redis.call('SET', KEYS[1], 'done:' .. ARGV[1], 'PX', ARGV[2])
	return 1
end
if v == 'done:' .. ARGV[1] then
	return 1
end
return 0
`)

// releaseScript deletes the key if it still holds the claim's lease (never
// a done-mark, which holds a different value).
var releaseScript = goredis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
	return redis.call('DEL', KEYS[1])
end
return 0
`)

// redisKey is the Redis key of a dedup key: "<prefix>{<key>}", the key
// bounded as every store bounds it (storedkey.Bounded), so a producer's
// megabyte of event ID does not become a megabyte of key kept for the
// retention period. Keys up to storedkey.MaxLen bytes keep exactly the form
// they always had, so the leases and done-marks already in Redis stay
// valid across the upgrade; only longer keys, now hashed, would be seen as
// new once (at-least-once, as after a restart without persistence).
func (s *Store) redisKey(key string) string {
	return s.prefix + "{" + storedkey.Bounded(key) + "}"
}

// Claim implements [dedup.Store] in one round trip, which it shares with
// the calls of other goroutines made at the same time.
func (s *Store) Claim(ctx context.Context, key string, lease time.Duration) (dedup.Claim, error) {
	if key == "" {
		return dedup.Claim{}, errors.New("dedup/redis: claim: empty key")
	}
	if lease < time.Millisecond {
		return dedup.Claim{}, fmt.Errorf("dedup/redis: claim %q: lease must be at least 1ms, got %v", key, lease)
	}
	token := rand.Text()
	res, err := s.run(ctx, claimScript, s.redisKey(key), token, lease.Milliseconds())
	if err != nil {
		return dedup.Claim{}, fmt.Errorf("dedup/redis: claim %q: %w", key, refused(err))
	}
	switch res {
	case claimAcquired:
		return dedup.Claim{Key: key, Token: token, Result: dedup.Acquired}, nil
	case claimDone:
		return dedup.Claim{Key: key, Result: dedup.Done}, nil
	case claimBusy:
		return dedup.Claim{Key: key, Result: dedup.Busy}, nil
	}
	return dedup.Claim{}, fmt.Errorf("dedup/redis: claim %q: script answered %d", key, res)
}

// Complete implements [dedup.Store]. A lease that expired without being
// taken over still completes: its key is empty, and the done-mark is
// written.
func (s *Store) Complete(ctx context.Context, c dedup.Claim) error {
	if err := checkHeld(c); err != nil {
		return err
	}
	ok, err := s.run(ctx, completeScript, s.redisKey(c.Key), c.Token, s.retention.Milliseconds())
	if err != nil {
		return fmt.Errorf("dedup/redis: complete %q: %w", c.Key, refused(err))
	}
	if ok != 1 {
		return fmt.Errorf("dedup/redis: complete %q: %w", c.Key, dedup.ErrLeaseLost)
	}
	return nil
}

// Release implements [dedup.Store].
func (s *Store) Release(ctx context.Context, c dedup.Claim) error {
	if err := checkHeld(c); err != nil {
		return err
	}
	if _, err := s.run(ctx, releaseScript, s.redisKey(c.Key), c.Token); err != nil {
		return fmt.Errorf("dedup/redis: release %q: %w", c.Key, refused(err))
	}
	return nil
}

// refused marks err as the call's own ([dedup.ErrRefused]) when Redis
// answered it that the key holds another type of value (WRONGTYPE, on its
// own or inside a script's error): that key fails every call, while the
// store serves every other. Every other error stays the store's, Redis's
// answers that it cannot serve now among them (LOADING, READONLY, OOM,
// BUSY, MASTERDOWN, an ACL that denies the scripts).
func refused(err error) error {
	var rerr goredis.Error
	if errors.As(err, &rerr) && strings.Contains(rerr.Error(), "WRONGTYPE") {
		return dedup.Refused(err)
	}
	return err
}

func checkHeld(c dedup.Claim) error {
	if c.Key == "" || c.Token == "" {
		return fmt.Errorf("dedup/redis: claim %q holds no lease (result %v)", c.Key, c.Result)
	}
	return nil
}
