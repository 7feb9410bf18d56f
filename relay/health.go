package relay

import (
	"net/http"
	"sync/atomic"
	"time"

	"github.com/warrenmq/warren/internal/amqpx"
	"github.com/warrenmq/warren/internal/healthhttp"
)

// Health is what the relay's health endpoints report.
type Health struct {
	// Alive: Run is running and no worker loop is stuck. A process whose
	// relay is not alive should be restarted.
	Alive bool `json:"alive"`
	// Ready: connected to the broker, the broker is not blocking the
	// connection, and the last claim reached Postgres.
	Ready bool `json:"ready"`

	BrokerConnected bool `json:"broker_connected"`
	// BrokerBlocked: the broker blocked the connection (a memory or disk
	// alarm, BlockedReason says which) and refuses every publisher's
	// messages until the alarm clears. The relay claims nothing meanwhile,
	// and rows keep their attempts. It makes the relay not ready but
	// still alive: a restart cannot help, and the relay resumes by itself
	// when the broker unblocks it.
	BrokerBlocked bool      `json:"broker_blocked,omitempty"`
	BlockedReason string    `json:"blocked_reason,omitempty"`
	BlockedSince  time.Time `json:"blocked_since,omitzero"`
	// HeldBack: a consumer's queue (HeldBy) reached Config.HoldBack's
	// HighWater, and the relay claims nothing until it is back at
	// LowWater. It changes neither Alive nor Ready: the backlog waits in
	// the outbox, as designed, and a restart would not move it.
	HeldBack  bool      `json:"held_back,omitempty"`
	HeldBy    string    `json:"held_by,omitempty"`
	HeldSince time.Time `json:"held_since,omitzero"`
	// DatabaseOK: the last claim query succeeded (while the relay claims
	// nothing, held back or blocked, the last ping of the database).
	DatabaseOK bool `json:"database_ok"`
	// LastClaim is when a claim query last succeeded (zero if none yet).
	LastClaim time.Time `json:"last_claim,omitzero"`
	// StuckWorkers counts worker loops that have not come round for longer
	// than a healthy cycle can take.
	StuckWorkers int `json:"stuck_workers,omitempty"`
}

// healthState is the state Health reads, written by the relay's goroutines.
type healthState struct {
	running    atomic.Bool
	brokerUp   atomic.Bool
	block      amqpx.BlockState // of the current broker connection
	held       amqpx.BlockState // HoldBack's: the reason is the queue
	claimOK    atomic.Bool
	lastClaim  atomic.Int64   // unix nanoseconds of the last successful claim
	beats      []atomic.Int64 // per worker: unix nanoseconds of its latest loop, 0 while it is not running
	stuckAfter time.Duration
}

func newHealth(cfg Config) *healthState {
	return &healthState{
		beats: make([]atomic.Int64, cfg.Workers),
		// The longest a healthy loop can take: a claim (Lease/2), a
		// publish (PublishTimeout) and a settle that retries until the
		// lease ends, then a wait of at most PollMax or a reconnect delay.
		stuckAfter: 2*cfg.Lease + cfg.PollMax + cfg.ReconnectMaxDelay,
	}
}

// claimed records a claim's outcome; the time first, so that a Health
// that reads DatabaseOK also reads when the claim was.
func (h *healthState) claimed(ok bool) {
	if ok {
		h.lastClaim.Store(time.Now().UnixNano())
	}
	h.claimOK.Store(ok)
}

// Health returns the relay's current health.
func (r *Relay) Health() Health {
	h := r.health
	out := Health{BrokerConnected: h.brokerUp.Load(), DatabaseOK: h.claimOK.Load()}
	out.BrokerBlocked, out.BlockedReason, out.BlockedSince = h.block.Blocked()
	out.HeldBack, out.HeldBy, out.HeldSince = h.held.Blocked()
	if ns := h.lastClaim.Load(); ns != 0 {
		out.LastClaim = time.Unix(0, ns)
	}
	now := time.Now().UnixNano()
	for i := range h.beats {
		if beat := h.beats[i].Load(); beat != 0 && time.Duration(now-beat) > h.stuckAfter {
			out.StuckWorkers++
		}
	}
	out.Alive = h.running.Load() && out.StuckWorkers == 0
	out.Ready = out.Alive && out.BrokerConnected && !out.BrokerBlocked && out.DatabaseOK
	return out
}

// HealthHandler serves /healthz (200 while Run runs and no worker is
// stuck) and /readyz (200 while the relay can claim and publish: not
// while the broker blocks its connection), each
// with the Health as JSON, 503 otherwise.
func (r *Relay) HealthHandler() http.Handler {
	return healthhttp.Handler(r.Health, func(h Health) bool { return h.Alive }, func(h Health) bool { return h.Ready })
}
