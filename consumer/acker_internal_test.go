package consumer

import (
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// fakeBroker enforces the broker's side of acknowledgements: a tag must be
// outstanding to be acked, and an ack — above all a multiple one — must
// never cover a delivery the handler has not finished. It also plays the
// prefetch window, delivering only while fewer than window are unacked.
type fakeBroker struct {
	mu          sync.Mutex
	cond        *sync.Cond
	window      int
	nextTag     uint64
	outstanding map[uint64]bool // tag → the worker finished it (acked) in the test's view
	ackFrames   int
	errs        []string
}

func newFakeBroker(window int) *fakeBroker {
	b := &fakeBroker{window: window, nextTag: 1, outstanding: map[uint64]bool{}}
	b.cond = sync.NewCond(&b.mu)
	return b
}

// deliver blocks until the window has room, then hands out the next tag.
func (b *fakeBroker) deliver(timeout time.Duration) (uint64, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	deadline := time.Now().Add(timeout)
	for len(b.outstanding) >= b.window {
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("prefetch window stuck full with %d unacked", len(b.outstanding))
		}
		b.mu.Unlock()
		time.Sleep(time.Millisecond)
		b.mu.Lock()
	}
	tag := b.nextTag
	b.nextTag++
	b.outstanding[tag] = false
	return tag, nil
}

func (b *fakeBroker) finished(tag uint64) {
	b.mu.Lock()
	b.outstanding[tag] = true
	b.mu.Unlock()
}

func (b *fakeBroker) Ack(tag uint64, multiple bool) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.ackFrames++
	if _, ok := b.outstanding[tag]; !ok {
		b.errs = append(b.errs, fmt.Sprintf("ack of unknown delivery tag %d (multiple=%v)", tag, multiple))
		return nil
	}
	for t, done := range b.outstanding {
		if t == tag || (multiple && t < tag) {
			if !done {
				b.errs = append(b.errs, fmt.Sprintf("ack (tag %d, multiple=%v) covers tag %d whose handler has not finished: message lost", tag, multiple, t))
			}
			delete(b.outstanding, t)
		}
	}
	return nil
}

func (b *fakeBroker) Nack(tag uint64, multiple, requeue bool) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.outstanding[tag]; !ok || multiple || !requeue {
		b.errs = append(b.errs, fmt.Sprintf("bad nack of tag %d multiple=%v requeue=%v", tag, multiple, requeue))
	}
	delete(b.outstanding, tag)
	return nil
}

// runAckerScenario delivers n messages through a pool of workers that
// finish in an order chosen by pick and settles them through an acker.
func runAckerScenario(t *testing.T, n, window, workers int, slow func(tag uint64) time.Duration, nack func(tag uint64) bool) *fakeBroker {
	t.Helper()
	b := newFakeBroker(window)
	a := newAcker(b, window, slog.New(slog.NewTextHandler(io.Discard, nil)))
	go a.run()
	work := make(chan uint64)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for tag := range work {
				if d := slow(tag); d > 0 {
					time.Sleep(d)
				}
				ok := !nack(tag)
				if ok {
					b.finished(tag)
				}
				a.settle(ackVerdict{tag: tag, ack: ok})
			}
		})
	}
	for range n {
		tag, err := b.deliver(5 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		work <- tag
	}
	close(work)
	wg.Wait()
	a.stopAndFlush()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, e := range b.errs {
		t.Error(e)
	}
	if len(b.outstanding) != 0 {
		t.Errorf("%d deliveries never settled", len(b.outstanding))
	}
	return b
}

func TestAckerCoalescesInOrderCompletions(t *testing.T) {
	t.Parallel()
	const n = 20000
	b := runAckerScenario(t, n, 256, 16, func(uint64) time.Duration { return 0 }, func(uint64) bool { return false })
	if b.ackFrames > n/4 {
		t.Errorf("%d ack frames for %d messages: completions are not being coalesced", b.ackFrames, n)
	}
	t.Logf("%d messages settled with %d ack frames", n, b.ackFrames)
}

func TestAckerWithRandomOrderAndNacks(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	var mu sync.Mutex
	delays := map[uint64]time.Duration{}
	slow := func(tag uint64) time.Duration {
		mu.Lock()
		defer mu.Unlock()
		if d, ok := delays[tag]; ok {
			return d
		}
		d := time.Duration(0)
		if rng.IntN(50) == 0 {
			d = time.Duration(rng.IntN(3000)) * time.Microsecond
		}
		delays[tag] = d
		return d
	}
	nack := func(tag uint64) bool { return tag%97 == 0 }
	runAckerScenario(t, 5000, 64, 8, slow, nack)
}

// One slow handler holding the lowest tag must not freeze the window: acks
// behind it go out individually after a short wait.
func TestAckerDoesNotLetASlowMessageHoldTheWindow(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	slowDone := make(chan struct{})
	b := newFakeBroker(32)
	a := newAcker(b, 32, slog.New(slog.NewTextHandler(io.Discard, nil)))
	go a.run()
	first, _ := b.deliver(time.Second)
	go func() {
		<-release
		b.finished(first)
		a.settle(ackVerdict{tag: first, ack: true})
		close(slowDone)
	}()
	// 500 more messages flow through a 32-message window while tag 1 waits.
	for range 500 {
		tag, err := b.deliver(5 * time.Second)
		if err != nil {
			t.Fatalf("window stuck behind the slow message: %v", err)
		}
		b.finished(tag)
		a.settle(ackVerdict{tag: tag, ack: true})
	}
	close(release)
	<-slowDone
	a.stopAndFlush()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, e := range b.errs {
		t.Error(e)
	}
	if len(b.outstanding) != 0 {
		t.Errorf("%d deliveries never acked", len(b.outstanding))
	}
}
