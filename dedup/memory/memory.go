package memory

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/warrenmq/warren/dedup"
)

// Config configures a [Store]. The zero value is ready to use.
type Config struct {
	// Retention is how long a completed key stays done. Default 7 days.
	Retention time.Duration
}

// DefaultRetention is the retention of a Store configured without one.
const DefaultRetention = 7 * 24 * time.Hour

// sweepEvery is how often Claim drops expired entries, so a long-running
// demo does not grow without bound.
const sweepEvery = time.Minute

// Store is an in-memory [dedup.Store]. It is safe for concurrent use.
type Store struct {
	retention time.Duration

	mu        sync.Mutex
	entries   map[string]entry
	nextSweep time.Time
}

// entry is a lease (done false) or a done-mark. An entry whose expires has
// passed means nothing and is treated as absent.
type entry struct {
	token   string
	done    bool
	expires time.Time
}

var _ dedup.Store = (*Store)(nil)

// New returns an empty store, or an error if cfg.Retention is negative.
func New(cfg Config) (*Store, error) {
	if cfg.Retention < 0 {
		return nil, fmt.Errorf("dedup/memory: negative retention %v", cfg.Retention)
	}
	cfg.Retention = cmp.Or(cfg.Retention, DefaultRetention)
	return &Store{retention: cfg.Retention, entries: map[string]entry{}}, nil
}

// Claim implements [dedup.Store].
func (s *Store) Claim(ctx context.Context, key string, lease time.Duration) (dedup.Claim, error) {
	if err := checkClaim(ctx, key, lease); err != nil {
		return dedup.Claim{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	s.sweep(now)
	if e, ok := s.entries[key]; ok && now.Before(e.expires) {
		if e.done {
			return dedup.Claim{Key: key, Result: dedup.Done}, nil
		}
		return dedup.Claim{Key: key, Result: dedup.Busy}, nil
	}
	token := rand.Text()
	s.entries[key] = entry{token: token, expires: now.Add(lease)}
	return dedup.Claim{Key: key, Token: token, Result: dedup.Acquired}, nil
}

// Complete implements [dedup.Store].
func (s *Store) Complete(ctx context.Context, c dedup.Claim) error {
	if err := checkHeld(ctx, c); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	e, ok := s.entries[c.Key]
	if ok && e.token != c.Token && now.Before(e.expires) {
		return fmt.Errorf("dedup/memory: complete %q: %w", c.Key, dedup.ErrLeaseLost)
	}
	// Nobody else holds the key: the mark is written over the claim's own
	// lease, over another's expired entry, and on a key with no entry (a
	// lease released, or swept after it ran out), as every store writes it.
	if !ok || e.token != c.Token || !e.done {
		s.entries[c.Key] = entry{token: c.Token, done: true, expires: now.Add(s.retention)}
	}
	return nil
}

// Release implements [dedup.Store].
func (s *Store) Release(ctx context.Context, c dedup.Claim) error {
	if err := checkHeld(ctx, c); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.entries[c.Key]; ok && e.token == c.Token && !e.done {
		delete(s.entries, c.Key)
	}
	return nil
}

func (s *Store) sweep(now time.Time) {
	if now.Before(s.nextSweep) {
		return
	}
	for k, e := range s.entries {
		if !now.Before(e.expires) {
			delete(s.entries, k)
		}
	}
	s.nextSweep = now.Add(sweepEvery)
}

// checkClaim and checkHeld also fail on a cancelled context, as a store
// that talks to a server would.
func checkClaim(ctx context.Context, key string, lease time.Duration) error {
	if key == "" {
		return errors.New("dedup/memory: claim: empty key")
	}
	if lease <= 0 {
		return fmt.Errorf("dedup/memory: claim %q: lease must be positive, got %v", key, lease)
	}
	return ctx.Err()
}

func checkHeld(ctx context.Context, c dedup.Claim) error {
	if c.Key == "" || c.Token == "" {
		return fmt.Errorf("dedup/memory: claim %q holds no lease (result %v)", c.Key, c.Result)
	}
	return ctx.Err()
}
