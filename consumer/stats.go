package consumer

import (
	"net/http"
	"sync/atomic"
	"time"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/internal/healthhttp"
)

type counter = atomic.Uint64

// counters are the consumer's running totals, updated by the workers.
type counters struct {
	received, done, skipped, duplicates       counter
	retried, deferred, deadLettered, requeued counter
	unavailable                               counter // of deferred: warren.Unavailable
	unrouted                                  counter // of skipped: no handler's prefix matched
	publishFailures, reconnects, blocks       counter
	publishersRenewed                         counter
	partitionsTaken, partitionsReleased       counter
	activePartitions                          atomic.Int64
	inFlight                                  atomic.Int64
	lastMessage                               atomic.Int64 // unix nanoseconds
	lastSettled                               atomic.Int64 // unix nanoseconds a handler last finished, or Run started
}

func (s *counters) moved(k move) *counter {
	switch k {
	case movedRetry:
		return &s.retried
	case movedDeferred:
		return &s.deferred
	default:
		return &s.deadLettered
	}
}

// Stats are a consumer's totals since it was created. Every message
// received ends in exactly one of Done, Skipped, Duplicates, Retried,
// Deferred, DeadLettered or Requeued, or is still in flight.
type Stats struct {
	Received uint64 `json:"received"`
	Done     uint64 `json:"done"`    // handled and acked
	Skipped  uint64 `json:"skipped"` // acked without handling (filters, no handler)
	// Unrouted: of Skipped, the events no handler's prefix matched (under
	// AckUnhandled). They pass no middleware: no dedup claim, no filter.
	Unrouted        uint64 `json:"unrouted"`
	Duplicates      uint64 `json:"duplicates"`    // acked as already handled
	Retried         uint64 `json:"retried"`       // sent to a retry tier after a transient failure
	Deferred        uint64 `json:"deferred"`      // sent to a retry tier without spending an attempt
	Unavailable     uint64 `json:"unavailable"`   // of Deferred: a dependency was unavailable before the handler ran
	DeadLettered    uint64 `json:"dead_lettered"` // sent to the DLQ
	Requeued        uint64 `json:"requeued"`      // handed back to the broker (shutdown, failed publish)
	PublishFailures uint64 `json:"publish_failures"`
	// PublishersRenewed counts the times every retry and dead-letter
	// publish was nacked for 5s and the consumer moved them to a new
	// channel (see the package's cluster notes).
	PublishersRenewed uint64 `json:"publishers_renewed,omitempty"`
	Reconnects        uint64 `json:"reconnects"`
	Blocks            uint64 `json:"blocks"` // times the broker blocked the connection (an alarm)
	InFlight          int64  `json:"in_flight"`
	// With Config.Partitions: how many partitions this replica is active
	// on now (it has received their deliveries), and how many times it
	// became active on one and handed one on to another replica.
	ActivePartitions   int64  `json:"active_partitions,omitempty"`
	PartitionsTaken    uint64 `json:"partitions_taken,omitempty"`
	PartitionsReleased uint64 `json:"partitions_released,omitempty"`
}

// Stats returns the consumer's totals.
func (c *BaseConsumer) Stats() Stats {
	s := &c.stats
	return Stats{
		Received: s.received.Load(), Done: s.done.Load(), Skipped: s.skipped.Load(), Unrouted: s.unrouted.Load(), Duplicates: s.duplicates.Load(),
		Retried: s.retried.Load(), Deferred: s.deferred.Load(), Unavailable: s.unavailable.Load(), DeadLettered: s.deadLettered.Load(), Requeued: s.requeued.Load(),
		PublishFailures: s.publishFailures.Load(), PublishersRenewed: s.publishersRenewed.Load(), Reconnects: s.reconnects.Load(), Blocks: s.blocks.Load(), InFlight: s.inFlight.Load(),
		ActivePartitions: s.activePartitions.Load(), PartitionsTaken: s.partitionsTaken.Load(), PartitionsReleased: s.partitionsReleased.Load(),
	}
}

// Health is what the health endpoints report.
type Health struct {
	// Alive: Run is running. A process whose consumer has stopped should
	// be restarted.
	Alive bool `json:"alive"`
	// Ready: connected and consuming, every dependency up, and the broker
	// not blocking the connection. False while reconnecting, during
	// shutdown, while a dependency is down (the consumer goes on deferring
	// the messages that need it) and while blocked.
	Ready bool `json:"ready"`
	// Blocked: the broker blocked the connection (a memory or disk alarm,
	// BlockedReason says which): retries, dead letters and acks wait
	// until the alarm clears. It makes the consumer not ready but still
	// alive: a restart cannot help, and the consumer resumes by itself
	// when the broker unblocks it.
	Blocked       bool      `json:"blocked,omitempty"`
	BlockedReason string    `json:"blocked_reason,omitempty"`
	BlockedSince  time.Time `json:"blocked_since,omitzero"`
	// Stuck: deliveries are in flight and none has finished for
	// Config.StuckAfter. The handlers hang; restarting the process hands
	// their deliveries back to the broker.
	Stuck bool `json:"stuck,omitempty"`
	// LastMessage is when the latest delivery arrived (zero if none yet).
	LastMessage time.Time `json:"last_message,omitzero"`
	// Prefetch is the current session's prefetch per channel: Config.Prefetch,
	// or lower to fit Config.MemoryBudget (0 before the first session).
	Prefetch int `json:"prefetch,omitempty"`
	// WorstCaseBytes is the most bytes of message bodies the current
	// session can hold (see Config.MemoryBudget). When the broker's
	// max_message_size is unknown (larger than MaxBodyBytes, and not
	// stated) and there is no budget, it is computed at the default of the
	// broker's RabbitMQ version, what a broker nobody configured allows
	// (128 MiB for 3.x, 16 MiB from 4.0), and WorstCaseBytesAtMost at
	// RabbitMQ's maximum, 512 MiB, to which an operator may have raised
	// it. Under a budget, or without a version, it is at that maximum: the
	// bound the budget is kept with.
	WorstCaseBytes int64 `json:"worst_case_bytes,omitempty"`
	// WorstCaseBytesAtMost is, for an unknown limit, the worst case at
	// RabbitMQ's maximum max_message_size (0 for a known limit).
	WorstCaseBytesAtMost int64 `json:"worst_case_bytes_at_most,omitempty"`
	// ActivePartitions, with Config.Partitions, are the partitions (by
	// index) this replica is active on: it has received their deliveries
	// on its current subscriptions. A partition with nothing to deliver
	// is not listed, even where this replica would get its next event.
	ActivePartitions []int `json:"active_partitions,omitempty"`
	// Dependencies are the states of Config.Dependencies.
	Dependencies []warren.DependencyState `json:"dependencies,omitempty"`
	Stats        Stats                    `json:"stats"`
}

// Health returns the consumer's current health.
func (c *BaseConsumer) Health() Health {
	h := Health{Alive: c.running.Load(), Stats: c.Stats()}
	h.Blocked, h.BlockedReason, h.BlockedSince = c.block.Blocked()
	h.Ready = c.ready.Load() && !h.Blocked
	for _, d := range c.cfg.Dependencies {
		st := d.State()
		h.Ready = h.Ready && st.Up
		h.Dependencies = append(h.Dependencies, st)
	}
	if mem := c.memory.Load(); mem != nil {
		h.Prefetch, h.WorstCaseBytes = mem.prefetch, mem.reported()
		if !mem.limit.exact() {
			h.WorstCaseBytesAtMost = mem.worstCase
		}
	}
	if ps := c.parts.Load(); ps != nil && c.ready.Load() {
		h.ActivePartitions = ps.active()
	}
	if ns := c.stats.lastMessage.Load(); ns != 0 {
		h.LastMessage = time.Unix(0, ns)
	}
	if after := c.cfg.StuckAfter; h.Alive && after > 0 && h.Stats.InFlight > 0 {
		h.Stuck = time.Since(time.Unix(0, c.stats.lastSettled.Load())) > after
	}
	return h
}

// HealthHandler serves /healthz (200 while Run runs and its handlers are
// not stuck) and /readyz (200 while connected and consuming, every
// dependency up and not blocked by the broker), each with
// the Health as JSON, 503 otherwise.
func (c *BaseConsumer) HealthHandler() http.Handler {
	return healthhttp.Handler(c.Health, func(h Health) bool { return h.Alive && !h.Stuck }, func(h Health) bool { return h.Ready })
}
