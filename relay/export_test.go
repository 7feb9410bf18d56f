package relay

import "github.com/warrenmq/warren/outbox"

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
