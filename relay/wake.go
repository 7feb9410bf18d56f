package relay

import (
	"math/rand/v2"
	"sync"
	"time"
)

// broadcast wakes every waiter at once. A waiter takes C before it starts
// work and waits on it afterwards, so a signal sent while it worked is not
// lost.
type broadcast struct {
	mu sync.Mutex
	ch chan struct{}
}

func newBroadcast() *broadcast { return &broadcast{ch: make(chan struct{})} }

// C returns a channel that is closed by the next Signal.
func (b *broadcast) C() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.ch
}

// Signal wakes everyone waiting on a channel C returned before it.
func (b *broadcast) Signal() {
	b.mu.Lock()
	defer b.mu.Unlock()
	close(b.ch)
	b.ch = make(chan struct{})
}

// retryDelay is how long a row waits after its attempt-th claim failed:
// lo doubled per attempt up to hi, then cut by a random part of up to
// half, so rows that failed together (a broker outage) come back spread
// out, yet never sooner than half the nominal delay.
func retryDelay(attempt int, lo, hi time.Duration) time.Duration {
	d := lo
	for i := 1; i < attempt && d < hi; i++ {
		d *= 2
	}
	d = min(d, hi)
	return d - time.Duration(rand.Int64N(int64(d)/2+1))
}

// sleep waits d or until done is closed; it reports whether d passed.
func sleep(done <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-done:
		return false
	}
}
