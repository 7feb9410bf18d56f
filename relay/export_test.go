package relay

// Test hooks: set before Run, called from the relay's goroutines.

// SetAfterClaimHook adds f after the claim hooks already set.
func SetAfterClaimHook(r *Relay, f func(rows []Row)) {
	prev := r.hooks.afterClaim
	if prev == nil {
		r.hooks.afterClaim = f
		return
	}
	r.hooks.afterClaim = func(rows []Row) { prev(rows); f(rows) }
}

func SetAfterSettleHook(r *Relay, f func()) { r.hooks.afterSettle = f }
func SetListeningHook(r *Relay, f func())   { r.hooks.listening = f }
func SetConnectedHook(r *Relay, f func())   { r.hooks.connected = f }

var (
	RetryDelay    = retryDelay
	ValidateTable = validateTable
	StorableJSON  = storableJSON
)
