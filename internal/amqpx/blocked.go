package amqpx

import (
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// BlockState tracks whether the broker has blocked a connection. During a
// memory or disk alarm RabbitMQ blocks every connection that publishes: it
// sends connection.blocked and stops reading the socket until the alarm
// clears (connection.unblocked). Publishes, acks and closes on that
// connection wait meanwhile, through no fault of what is being sent.
//
// The zero value is an unblocked state; it is safe for concurrent use.
type BlockState struct {
	mu     sync.Mutex
	reason string
	since  time.Time     // zero while not blocked
	lifted time.Time     // when the latest block ended
	wait   chan struct{} // closed when the current block ends; nil while not blocked
}

// Set records a connection.blocked (b.Active) or connection.unblocked
// notification and reports whether it changed the state.
func (s *BlockState) Set(b amqp.Blocking) bool {
	if !b.Active {
		return s.Reset()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.wait != nil {
		s.reason = b.Reason
		return false
	}
	s.reason, s.since, s.wait = b.Reason, time.Now(), make(chan struct{})
	return true
}

// Reset marks the connection unblocked, as when it is closed (a new
// connection starts unblocked), and reports whether it was blocked.
func (s *BlockState) Reset() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.wait == nil {
		return false
	}
	close(s.wait)
	s.reason, s.since, s.wait, s.lifted = "", time.Time{}, nil, time.Now()
	return true
}

// Blocked reports whether the connection is blocked, why (the broker's
// reason, e.g. "low on memory") and since when.
func (s *BlockState) Blocked() (blocked bool, reason string, since time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.wait != nil, s.reason, s.since
}

// Lifted returns a channel that is closed when the current block ends,
// or nil when the connection is not blocked.
func (s *BlockState) Lifted() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.wait == nil {
		return nil
	}
	return s.wait
}

// BlockedSince reports whether the connection was blocked at any time
// since t: it is blocked now, or a block ended after t.
func (s *BlockState) BlockedSince(t time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.wait != nil || s.lifted.After(t)
}

// ClosedWhileBlocked is the reason WatchBlocked gives when a block ends
// because the connection closed.
const ClosedWhileBlocked = "the connection closed"

// WatchBlocked subscribes to conn's connection.blocked and unblocked
// notifications now, so none is missed, and returns the loop that follows
// them, for the caller to run on a goroutine it waits for. The loop
// records each notification in state (a private one when nil) and calls
// onChange when that changes the state: with true and the broker's reason
// when a block begins, with false and "" when the broker lifts it. It
// returns once conn has closed, after a last onChange(false,
// ClosedWhileBlocked) if conn was blocked then: the state is reset, as
// the next connection starts unblocked.
func WatchBlocked(conn *amqp.Connection, state *BlockState, onChange func(blocked bool, reason string)) (loop func()) {
	if state == nil {
		state = new(BlockState)
	}
	// Room for the few notifications that can arrive while onChange runs:
	// the library's reader waits on a full channel.
	blocked := conn.NotifyBlocked(make(chan amqp.Blocking, 4))
	return func() {
		for b := range blocked {
			if state.Set(b) {
				onChange(b.Active, b.Reason)
			}
		}
		if state.Reset() {
			onChange(false, ClosedWhileBlocked)
		}
	}
}
