package relay

import (
	"math/rand/v2"
	"time"
)

// wakeup hands one waiting worker a turn per signal. A signal sent while
// every worker is busy is kept (one at most), so work committed during a
// cycle is claimed by the next one. Waking one worker, not all, matters at
// a steady trickle: every notification would otherwise send every worker
// to claim, and all but one would find nothing yet still spend a
// transaction doing so. A worker whose claim comes back full goes on
// claiming without a signal, and so does the backlog's share of the others
// as further notifications arrive.
type wakeup chan struct{}

func newWakeup() wakeup { return make(wakeup, 1) }

// Signal wakes one waiter, or the next one to wait.
func (w wakeup) Signal() {
	select {
	case w <- struct{}{}:
	default: // a turn is already pending
	}
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
