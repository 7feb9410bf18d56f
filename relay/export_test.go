package relay

// Test hooks: set before Run, called from the relay's goroutines.

func SetAfterClaimHook(r *Relay, f func(rows []Row)) { r.hooks.afterClaim = f }
func SetAfterSettleHook(r *Relay, f func())          { r.hooks.afterSettle = f }
func SetListeningHook(r *Relay, f func())            { r.hooks.listening = f }
func SetConnectedHook(r *Relay, f func())            { r.hooks.connected = f }

var (
	RetryDelay    = retryDelay
	ValidateTable = validateTable
	StorableJSON  = storableJSON
)
