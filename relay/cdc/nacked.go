package cdc

import (
	"sync"
	"time"
)

// nackLedger remembers since when each event (by row id) has been nacked,
// across sessions that end on a nack streak: the next one streams the same
// rows again, and an event that is nacked every time must still reach its
// NackTimeout. Any other end of a session clears it (see
// Relay.session): time spent reconnecting or standing by is not time spent
// being nacked. An event leaves it when it is confirmed, or once its dead
// mark is committed.
type nackLedger struct {
	mu    sync.Mutex
	since map[int64]time.Time
}

// clear forgets every event.
func (l *nackLedger) clear() {
	l.mu.Lock()
	defer l.mu.Unlock()
	clear(l.since)
}

// nackLedgerMax bounds the ledger. Far more events than can be in flight
// at once (BatchesInFlight+1 batches); past it, entries older than twice
// the timeout are forgotten, and then any, whose count starts again.
const nackLedgerMax = 1 << 16

// nacked records a nack of id at now and returns since when id has been
// nacked.
func (l *nackLedger) nacked(id int64, now time.Time, timeout time.Duration) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.since == nil {
		l.since = map[int64]time.Time{}
	}
	if first, ok := l.since[id]; ok {
		return first
	}
	if len(l.since) >= nackLedgerMax {
		for old, first := range l.since {
			if now.Sub(first) > 2*timeout {
				delete(l.since, old)
			}
		}
	}
	for old := range l.since {
		if len(l.since) < nackLedgerMax {
			break
		}
		delete(l.since, old)
	}
	l.since[id] = now
	return now
}

// forget drops id: it was confirmed, or its dead mark committed.
func (l *nackLedger) forget(id int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.since, id)
}
