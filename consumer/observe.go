package consumer

import (
	"time"

	"github.com/warrenmq/warren/dlq"
)

// Observer is told what a consumer does, so that metrics can count it
// without the consumer depending on a metrics library; package warrenprom
// implements it for Prometheus. Its methods are called concurrently from
// the workers and the connection supervisor and must return quickly
// without blocking. With no Observer configured, each call site costs one
// nil check. A method that panics costs only that report: the consumer
// recovers it and logs "the Observer panicked" at Error level with the
// method and the stack, at most once per method every 10 seconds.
// Unrecovered, Received's panic would end the process before the ack,
// and every restart would take the same delivery and panic again. A
// method that calls runtime.Goexit is logged too, and the worker that
// called it ends. A method that blocks holds its worker; a stop waits for
// it until ShutdownGrace.
type Observer interface {
	// Received is called when a worker takes a delivery. Every Received
	// is followed by exactly one Settled for the same delivery.
	Received(consumer string)

	// Settled is called when the delivery's fate is decided: acked,
	// moved to a retry tier or the DLQ (after the broker's confirm), or
	// handed back to the broker.
	Settled(consumer string, s Settlement)

	// Connected is called each time a session starts consuming;
	// reconnect is false the first time Run connects.
	Connected(consumer string, reconnect bool)

	// Disconnected is called when a consuming session ends: err is why it
	// was lost, or nil when Run is stopping.
	Disconnected(consumer string, err error)
}

// BlockObserver is implemented by an Observer that also wants to know
// when the broker blocks the consumer's connection (a memory or disk
// alarm: retries, dead letters and acks wait) and when it unblocks it.
// The consumer calls these methods when its Observer implements them; it
// is an interface of its own so that Observers written before it keep
// compiling.
type BlockObserver interface {
	// Blocked is called when the broker blocks the connection; reason
	// is the broker's ("low on memory", "low on disk space").
	Blocked(consumer, reason string)
	// Unblocked is called when the block ends: the broker lifted it, or
	// the connection it applied to is gone.
	Unblocked(consumer string)
}

// Disposition is what became of a delivery. Its values match the fields
// of [Stats].
type Disposition uint8

const (
	Done         Disposition = iota + 1 // handled and acked
	Skipped                             // acked without handling (filters, no handler)
	Duplicate                           // acked as already handled
	Retried                             // sent to a retry tier after a transient failure
	Deferred                            // sent to a retry tier without spending an attempt
	DeadLettered                        // sent to the DLQ
	Requeued                            // handed back to the broker (shutdown, failed publish)
)

var dispositionNames = [...]string{"", "done", "skipped", "duplicate", "retried", "deferred", "dead_lettered", "requeued"}

// String returns the disposition's name in snake case, as metrics label
// it: "done", "dead_lettered", ….
func (d Disposition) String() string {
	if int(d) < len(dispositionNames) && d != 0 {
		return dispositionNames[d]
	}
	return "unknown"
}

// Settlement describes one settled delivery.
type Settlement struct {
	// EventType is the decoded event's type; empty when the body did not
	// decode. It comes from the producer: bound it before using it as a
	// metric label.
	EventType   string
	Disposition Disposition
	// Class says why a DeadLettered message was dead-lettered; empty
	// otherwise.
	Class dlq.Class
	// Unavailable marks a Deferred message that was deferred because a
	// dependency was unavailable before its handler ran
	// ([warren.Unavailable]): a store outage, not the message's fault.
	Unavailable bool
	// HandlerDuration is how long the middleware chain and the handler
	// ran; zero when they did not run (the body did not decode).
	HandlerDuration time.Duration
	// EventCreatedAt is the event's created_at (Plane's timestamp), on
	// the producer's clock; zero when the body did not decode or had
	// none. Its distance to the settlement is the consumer's lag in time.
	EventCreatedAt time.Time
}
