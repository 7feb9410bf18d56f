package consumer

import (
	"context"
	"sync"
	"time"
)

// unroutedWarnEvery is how often the consumer says again, per event type,
// that events arrive which no handler takes.
const unroutedWarnEvery = 10 * time.Minute

// unrouted tracks the event types that arrived with no route, for the
// warning that makes a mistyped prefix (orders. for order.*) visible: every
// such event is acked as skipped, and nothing else would say so.
type unrouted struct {
	mu   sync.Mutex
	seen map[string]*unroutedType
}

type unroutedType struct {
	warned time.Time
	since  uint64 // events since the last warning
}

// note counts one event of eventType with no route and reports whether
// to warn now, with how many such events came since the last warning.
func (u *unrouted) note(eventType string, now time.Time) (warn bool, count uint64) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.seen == nil {
		u.seen = map[string]*unroutedType{}
	}
	t := u.seen[eventType]
	if t == nil {
		if len(u.seen) >= 1000 {
			// A flood of distinct types (a producer bug) keeps the first
			// thousand; the count in Stats goes on.
			return false, 0
		}
		t = &unroutedType{}
		u.seen[eventType] = t
	}
	t.since++
	if !t.warned.IsZero() && now.Sub(t.warned) < unroutedWarnEvery {
		return false, 0
	}
	t.warned, count, t.since = now, t.since, 0
	return true, count
}

// noteUnrouted counts an event no handler took (Stats.Unrouted) and warns,
// per event type, at its first arrival and every unroutedWarnEvery after.
// It runs where the message is settled, not where it is decided, so that
// consumertest, which only decides, leaves Stats and logs alone.
func (c *BaseConsumer) noteUnrouted(ctx context.Context, eventType string) {
	c.stats.unrouted.Add(1)
	if warn, n := c.unrouted.note(eventType, time.Now()); warn {
		c.log.WarnContext(ctx, "events arrive that no handler takes; they are acked as skipped (a mistyped prefix?)",
			"event_type", eventType, "events", n, "handled_prefixes", c.router.prefixes(), "again_in", unroutedWarnEvery)
	}
}
