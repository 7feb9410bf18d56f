package cdc

import (
	"net/http"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/warrenmq/warren/internal/amqpx"
	"github.com/warrenmq/warren/internal/healthhttp"
	"github.com/warrenmq/warren/internal/redact"
)

// Role is what a relay is doing about its group's slot.
type Role string

// The roles [Health] reports.
const (
	// RoleStreaming: the relay holds the slot and publishes its stream.
	RoleStreaming Role = "streaming"
	// RoleStandby: another relay streams the slot; this one tries to take
	// it over every StandbyRetry.
	RoleStandby Role = "standby"
	// RoleStarting: Run has started and its first session has neither
	// streamed nor found the slot held.
	RoleStarting Role = "starting"
	// RoleRetrying: the last session failed for another reason than a
	// held slot (Health.LastError says which); the relay waits and starts
	// again.
	RoleRetrying Role = "retrying"
	// RoleStopped: Run is not running.
	RoleStopped Role = "stopped"
)

// Health is what the relay's health endpoints report.
type Health struct {
	// Alive: Run is running and, while a session streams, the stream's
	// reader has come round within a minute (or four StatusIntervals, if
	// longer); it does every StatusInterval. A relay that is not alive
	// should be restarted.
	Alive bool `json:"alive"`
	// Ready: alive, and streaming the slot or standing by for it.
	Ready bool `json:"ready"`

	Role Role   `json:"role"`
	Slot string `json:"slot"`
	// FlushedLSN is the position before which every event is confirmed
	// by the broker and trimmed from the table: what the relay reports to
	// Postgres, and where the next session resumes. Empty before the
	// first session streamed.
	FlushedLSN string `json:"flushed_lsn,omitempty"`
	// LastBeat is when the stream's reader last told Postgres the flushed
	// position; zero while no session streams.
	LastBeat time.Time `json:"last_beat,omitzero"`
	// BrokerBlocked: the broker blocked the session's connection (a memory
	// or disk alarm, BlockedReason says which) and reads none of its
	// publishes until the alarm clears. It makes the relay not ready but
	// still alive: a restart cannot help. The session's batches wait
	// meanwhile, up to PublishTimeout, and the next session starts
	// unblocked until it publishes.
	BrokerBlocked bool      `json:"broker_blocked,omitempty"`
	BlockedReason string    `json:"blocked_reason,omitempty"`
	BlockedSince  time.Time `json:"blocked_since,omitzero"`
	// LastError is why the latest session ended (for a standby: that
	// another relay holds the slot), passwords masked, and LastErrorAt
	// when.
	LastError   string    `json:"last_error,omitempty"`
	LastErrorAt time.Time `json:"last_error_at,omitzero"`
}

// healthState is what Health reads, written by Run and the reader.
type healthState struct {
	role    atomic.Value // Role; nil until Run starts
	beat    atomic.Int64 // unix nanoseconds of the reader's latest status; 0 while no reader runs
	lastErr atomic.Pointer[sessionError]
	block   amqpx.BlockState // the session's connection, as the broker reports it
}

type sessionError struct {
	text string
	at   time.Time
}

// stuckAfter bounds a healthy reader's round: it sends a status every
// StatusInterval, and its waits (a receive, room in the queue) end by
// then. A round past a minute is a send or a receive the socket holds,
// which Postgres's own wal_sender_timeout (60s by default) would not let
// a live server do to a live relay.
func (c Config) stuckAfter() time.Duration { return max(time.Minute, 4*c.StatusInterval) }

func (h *healthState) setRole(role Role) { h.role.Store(role) }

// sessionEnded records why a session ended: a held slot makes the relay a
// standby, anything else a relay that retries.
func (h *healthState) sessionEnded(err error) {
	if err == nil {
		return
	}
	h.lastErr.Store(&sessionError{text: redact.Secrets(err.Error()), at: time.Now()})
	if isSlotBusy(err) {
		h.setRole(RoleStandby)
	} else {
		h.setRole(RoleRetrying)
	}
}

// stamp records that the reader came round.
func (h *healthState) stamp() { h.beat.Store(time.Now().UnixNano()) }

// Health returns the relay's current health.
func (r *Relay) Health() Health {
	h := &r.health
	out := Health{Role: RoleStopped, Slot: r.cfg.Slot}
	if role, ok := h.role.Load().(Role); ok {
		out.Role = role
	}
	if out.Role != RoleStopped && r.streaming.Load() {
		out.Role = RoleStreaming
	}
	if lsn := r.flushed.Load(); lsn != 0 {
		out.FlushedLSN = pglogrepl.LSN(lsn).String()
	}
	if ns := h.beat.Load(); ns != 0 {
		out.LastBeat = time.Unix(0, ns)
	}
	if e := h.lastErr.Load(); e != nil {
		out.LastError, out.LastErrorAt = e.text, e.at
	}
	out.BrokerBlocked, out.BlockedReason, out.BlockedSince = h.block.Blocked()
	wedged := !out.LastBeat.IsZero() && time.Since(out.LastBeat) > r.cfg.stuckAfter()
	out.Alive = out.Role != RoleStopped && !wedged
	out.Ready = out.Alive && (out.Role == RoleStreaming || out.Role == RoleStandby) && !out.BrokerBlocked
	return out
}

// HealthHandler serves /healthz (200 while Run runs and the stream's
// reader is not wedged) and /readyz (200 while the relay streams the slot,
// its connection not blocked by the broker, or stands by for it), each with the Health as JSON, 503 otherwise.
func (r *Relay) HealthHandler() http.Handler {
	return healthhttp.Handler(r.Health, func(h Health) bool { return h.Alive }, func(h Health) bool { return h.Ready })
}
