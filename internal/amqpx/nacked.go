package amqpx

import (
	"sync"
	"time"
)

// NackedSessionLimit is how long every verdict on one broker session may
// be a nack, with no confirm among them, before a relay ends the session
// and dials again. RabbitMQ (3.10 at least) keeps nacking every
// publish to a quorum queue on a channel that first published to it just
// after the node leading the queue died, before the other members had
// elected a new leader: on that channel the queue stays refused until the
// dead node is back, which may be hours, while a channel opened after the
// election is served at once. A relay that reconnected in that moment
// (its own node was the one that died) would deliver nothing until then.
// A queue that refuses on purpose (reject-publish at its length limit)
// costs a reconnect every so often and nothing more: its rows wait for
// their retry either way.
const NackedSessionLimit = 5 * time.Second

// NackStreak tracks since when every publish verdict of the current
// session has been a nack. Its zero value is ready; it is safe for
// concurrent use.
type NackStreak struct {
	mu    sync.Mutex
	since time.Time // the first nack after the last confirm; zero: none
}

// Reset starts a session's record.
func (s *NackStreak) Reset() {
	s.mu.Lock()
	s.since = time.Time{}
	s.mu.Unlock()
}

// Record notes one verdict: a confirm ends a streak, a nack starts one
// or extends it. Other failures (timeouts, a lost channel) say nothing
// about the channel's queues and are not recorded.
func (s *NackStreak) Record(nacked bool, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case !nacked:
		s.since = time.Time{}
	case s.since.IsZero():
		s.since = now
	}
}

// Stale reports whether every verdict for at least limit before now was a
// nack, and for how long.
func (s *NackStreak) Stale(now time.Time, limit time.Duration) (time.Duration, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.since.IsZero() {
		return 0, false
	}
	d := now.Sub(s.since)
	return d, d >= limit
}
