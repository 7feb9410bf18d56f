package cdc_test

// The kill test's ledger: every event's arrivals, and the verdict on them.

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/warrenmq/warren/internal/testenv"
)

// ledger is every delivery of the test's queue, in arrival order: the
// consumer auto-acks, so the ledger is the only record.
type ledger struct {
	mu       sync.Mutex
	count    map[string]int
	arrivals []arrival
}

// arrival is one delivery.
type arrival struct {
	id    string
	at    time.Time
	epoch int64 // kills before it arrived
}

// consumeLedger consumes queue into a ledger until the test ends; kills
// says how many kills came before each delivery.
func consumeLedger(t *testing.T, queue string, kills func() int64) *ledger {
	t.Helper()
	ch := testenv.Channel(t)
	deliveries, err := ch.Consume(queue, "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	l := &ledger{count: map[string]int{}}
	var wg sync.WaitGroup
	wg.Go(func() {
		for d := range deliveries {
			l.mu.Lock()
			l.count[d.MessageId]++
			l.arrivals = append(l.arrivals, arrival{id: d.MessageId, at: time.Now(), epoch: kills()})
			l.mu.Unlock()
		}
	})
	t.Cleanup(func() {
		ch.Close()
		wg.Wait()
	})
	return l
}

func (l *ledger) received(id string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.count[id] > 0
}

// history says after how many kills each delivery of id arrived.
func (l *ledger) history(id string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, a := range l.arrivals {
		if a.id == id {
			out = append(out, strconv.FormatInt(a.epoch, 10))
		}
	}
	return fmt.Sprint(out)
}

func (l *ledger) distinct() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.count)
}

func (l *ledger) snapshot() []arrival {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.arrivals)
}

// explain logs what is missing, for a failed test; committed is nil when
// the writers did not finish.
func (l *ledger) explain(t *testing.T, committed []int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	missing := missingIDs(committed, func(id string) bool { return l.count[id] > 0 })
	t.Logf("ledger: %d deliveries of %d distinct ids; %d committed events missing, among them %v",
		len(l.arrivals), len(l.count), len(missing), missing[:min(20, len(missing))])
}

// verdict is what the ledger shows.
type verdict struct {
	deliveries, duplicates int
	dupByEpoch             map[int64]int // duplicates that arrived after that many kills
	missing                []string
	outOfOrder             []string
	peak                   int // the most deliveries within one window
}

// analyse reads the arrivals against what committed: every event must
// have arrived, and each entity's first arrivals must have strictly
// increasing sequence numbers (its commit order).
func analyse(arrivals []arrival, committed []int, window time.Duration) verdict {
	v := verdict{deliveries: len(arrivals), dupByEpoch: map[int64]int{}}
	seen := map[string]bool{}
	lastSeq := make([]int, len(committed))
	for _, a := range arrivals {
		if seen[a.id] {
			v.duplicates++
			v.dupByEpoch[a.epoch]++
			continue
		}
		seen[a.id] = true
		entity, seq, ok := entitySeq(a.id)
		if !ok || entity >= len(committed) {
			continue
		}
		if seq <= lastSeq[entity] {
			v.outOfOrder = append(v.outOfOrder, fmt.Sprintf("%s after seq %d", a.id, lastSeq[entity]))
		}
		lastSeq[entity] = max(lastSeq[entity], seq)
	}
	v.missing = missingIDs(committed, func(id string) bool { return seen[id] })
	// Arrivals are in time order: the widest run within window.
	for lo, hi := 0, 0; hi < len(arrivals); hi++ {
		for arrivals[hi].at.Sub(arrivals[lo].at) > window {
			lo++
		}
		v.peak = max(v.peak, hi-lo+1)
	}
	return v
}

// missingIDs returns the ids of the committed events that did not arrive.
func missingIDs(committed []int, arrived func(id string) bool) []string {
	var out []string
	for entity, last := range committed {
		for seq := 1; seq <= last; seq++ {
			if id := killEvent(entity, seq).ID; !arrived(id) {
				out = append(out, id)
			}
		}
	}
	return out
}

// worstKill returns the kill after which the most duplicates arrived
// (a duplicate counts for the last kill before its arrival; the next
// relay publishes the killed one's window again soon after it takes over,
// well before the next kill), and how many.
func (v verdict) worstKill() (kill int64, dups int) {
	for epoch, n := range v.dupByEpoch {
		if epoch > 0 && n > dups {
			kill, dups = epoch, n
		}
	}
	return kill, dups
}

// lockedBuffer is a bytes.Buffer that a process's output and the test
// may use at once.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
