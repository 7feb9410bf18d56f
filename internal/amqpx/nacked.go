package amqpx

import (
	"sync"
	"time"
)

// NackedSessionLimit is how long every verdict for one destination on one
// broker session may be a nack, with no confirm for it among them, before
// a relay ends the session and dials again (see [NackStreak]). RabbitMQ (3.10 at least) keeps nacking every
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

// NackStreak tracks the current session's streaks of nacks, one per
// destination (where the publish went: an exchange and routing key, or a
// queue). RabbitMQ's refusal after an election is per channel and queue,
// and the channel keeps serving its other queues: a confirm says that the
// channel serves its destination, nothing of another. So a destination's
// streak is its nacks since its last confirm, and only its own confirm
// ends it.
//
// A streak forms when two nacks of one destination, with no confirm
// between, come within NackedSessionLimit of each other; once formed it
// lasts, whatever the gaps, until that destination's confirm or a new
// session. A refused event is retried at doubling delays (the relay's
// first retry within about a second, the later ones past the limit), so a
// stuck channel forms a streak early and keeps it while the gaps grow,
// however the jitter falls. A single nack followed by silence forms
// nothing: a quiet relay with one event a queue refuses on purpose
// (reject-publish at its length limit, retried minutes apart) does not
// end its session at every retry, and after one renewal its streak
// forms again only if nacks come close together again.
//
// At most maxNackDestinations destinations are tracked; a nack for one
// more forgets the one nacked longest ago. Its zero value is ready; it is
// safe for concurrent use.
type NackStreak struct {
	mu    sync.Mutex
	dests map[string]*streak
}

// streak is one destination's nacks since its last confirm.
type streak struct {
	since, last time.Time // its first and latest nack
	formed      bool      // two nacks within NackedSessionLimit of each other
}

// maxNackDestinations bounds NackStreak's memory: a relay publishes to a
// handful of routing keys at a time, a consumer to its retry and dead
// letter queues.
const maxNackDestinations = 256

// Destination names where a publish went, for [NackStreak.Record].
func Destination(exchange, routingKey string) string {
	return exchange + "\x00" + routingKey
}

// Reset starts a session's record.
func (s *NackStreak) Reset() {
	s.mu.Lock()
	s.dests = nil
	s.mu.Unlock()
}

// Record notes one verdict for dest: a confirm ends dest's streak, a nack
// extends it (see [NackStreak] for when it forms). Other failures
// (timeouts, a lost channel) say nothing about the channel's queues and
// are not recorded.
func (s *NackStreak) Record(dest string, nacked bool, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.dests[dest]
	switch {
	case !nacked:
		delete(s.dests, dest)
	case st == nil:
		s.forgetOldest()
		if s.dests == nil {
			s.dests = make(map[string]*streak)
		}
		s.dests[dest] = &streak{since: now, last: now}
	case !st.formed && now.Sub(st.last) > NackedSessionLimit:
		// one nack, then a silence: it says nothing of the channel now
		st.since, st.last = now, now
	default:
		st.formed, st.last = true, now
	}
}

// forgetOldest makes room for one more destination.
func (s *NackStreak) forgetOldest() {
	if len(s.dests) < maxNackDestinations {
		return
	}
	var oldest string
	for d, st := range s.dests {
		if oldest == "" || st.last.Before(s.dests[oldest].last) {
			oldest = d
		}
	}
	delete(s.dests, oldest)
}

// Stale reports whether some destination's streak spans at least limit,
// from its first nack to its last, and is still going (its last nack
// within limit of now); and the longest such span. One nack followed by
// silence spans nothing: it never ends a session.
func (s *NackStreak) Stale(now time.Time, limit time.Duration) (time.Duration, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var longest time.Duration
	for _, st := range s.dests {
		if d := st.last.Sub(st.since); st.formed && d >= limit && now.Sub(st.last) <= limit {
			longest = max(longest, d)
		}
	}
	return longest, longest > 0
}
