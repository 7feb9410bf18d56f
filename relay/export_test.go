package relay

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/warrenmq/warren/outbox"
)

// Test hooks: set before Run, called from the relay's goroutines.

// SetAfterClaimHook adds f after the claim hooks already set.
func SetAfterClaimHook(r *Relay, f func(rows []outbox.Row)) {
	prev := r.hooks.afterClaim
	if prev == nil {
		r.hooks.afterClaim = f
		return
	}
	r.hooks.afterClaim = func(rows []outbox.Row) { prev(rows); f(rows) }
}

func SetAfterSettleHook(r *Relay, f func()) { r.hooks.afterSettle = f }
func SetListeningHook(r *Relay, f func())   { r.hooks.listening = f }
func SetConnectedHook(r *Relay, f func())   { r.hooks.connected = f }
func SetReadingHook(r *Relay, f func())     { r.hooks.reading = f }

var (
	RetryDelay = retryDelay
)

// PlaneStatements returns the statements the relay runs on a Plane table,
// by name.
func PlaneStatements(ob *outbox.Table, maxAttempts int, migrated bool) map[string]string {
	s := renderPlaneStatements(ob, maxAttempts, migrated)
	return map[string]string{
		"claim": s.claim, "claimTakeover": s.claimTakeover, "settle": s.settleDelete,
		"failure": s.settleFailure, "release": s.release,
	}
}

// SetPlaneTakeoverClaim replaces the statement of the claims that look for
// lapsed claims on a Plane table.
func SetPlaneTakeoverClaim(r *Relay, query string) {
	s := *r.sql.Load()
	s.claimTakeover = query
	r.sql.Store(&s)
}

// ClaimBatch runs the claim a worker's cycle starts with, on pool, and
// returns the rows it claimed, leaving them claimed.
func ClaimBatch(ctx context.Context, r *Relay, pool *pgxpool.Pool) ([]outbox.Row, error) {
	_, rows, err := r.claimBatch(ctx, pool)
	out := make([]outbox.Row, len(rows))
	for i, c := range rows {
		out[i] = c.Row
	}
	return out, err
}
