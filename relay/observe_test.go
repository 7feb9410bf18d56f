package relay_test

import (
	"sync"
	"testing"
	"time"

	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/outbox"
	"github.com/warrenmq/warren/relay"
	"github.com/warrenmq/warren/relay/internal/observertest"
)

// recordingObserver counts what a relay tells its Observer.
type recordingObserver struct {
	mu                  sync.Mutex
	notify, poll        int
	published, failures int
	dead                int
	stats               []outbox.Stats
	outboxes            map[string]bool
}

func (o *recordingObserver) note(outbox string, f func()) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.outboxes == nil {
		o.outboxes = map[string]bool{}
	}
	o.outboxes[outbox] = true
	f()
}

func (o *recordingObserver) Woken(outbox string, byNotify bool) {
	o.note(outbox, func() {
		if byNotify {
			o.notify++
		} else {
			o.poll++
		}
	})
}

func (o *recordingObserver) Published(outbox string, p relay.Publication) {
	o.note(outbox, func() {
		if p.Err != nil {
			o.failures++
		} else {
			o.published++
		}
	})
}

func (o *recordingObserver) Dead(outbox string, n int) { o.note(outbox, func() { o.dead += n }) }

func (o *recordingObserver) OutboxStats(outbox string, s outbox.Stats) {
	o.note(outbox, func() { o.stats = append(o.stats, s) })
}

func (o *recordingObserver) snapshot() recordingObserver {
	o.mu.Lock()
	defer o.mu.Unlock()
	return recordingObserver{notify: o.notify, poll: o.poll, published: o.published, failures: o.failures, dead: o.dead, stats: o.stats, outboxes: o.outboxes}
}

// TestObserverSeesNotifyWakeups: with a poll so slow it never fires, an
// event committed while the relay waits is claimed after a notification,
// and the observer is told so.
func TestObserverSeesNotifyWakeups(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.bindQueue()
	got := consume(t, e.queue)
	obs := &recordingObserver{}
	cfg := e.config(testenv.Name(t, "relay"))
	cfg.Observer = obs
	cfg.Workers = 1
	cfg.PollMin, cfg.PollMax = time.Hour, time.Hour
	cfg.StatsInterval = 20 * time.Millisecond
	listening := make(chan struct{})
	var once sync.Once
	run := e.start(cfg, func(r *relay.Relay) {
		relay.SetListeningHook(r, func() { once.Do(func() { close(listening) }) })
	})
	select {
	case <-listening:
	case <-time.After(60 * time.Second):
		t.Fatal("the relay never started listening")
	}
	// Past its first claim the only worker waits for an hour's poll or a
	// notification; whatever claims the event next was woken by one.
	testenv.WaitFor(t, 60*time.Second, "the relay's first claim", func() bool { return !run.relay.Health().LastClaim.IsZero() })
	e.publish(event("notified-1"))
	got.waitDistinct(t, 1, 60*time.Second)
	testenv.WaitFor(t, 60*time.Second, "the publish to be observed", func() bool { return obs.snapshot().published == 1 })
	s := obs.snapshot()
	if s.notify < 1 || s.poll != 0 {
		t.Errorf("wake-ups: %d by notify, %d by poll; want at least one by notify and none by poll", s.notify, s.poll)
	}
	if s.failures != 0 || s.dead != 0 {
		t.Errorf("failures %d, dead %d; want none", s.failures, s.dead)
	}
	testenv.WaitFor(t, 60*time.Second, "stats showing the table empty", func() bool {
		st := obs.snapshot().stats
		return len(st) > 0 && st[len(st)-1].Pending == 0
	})
	if len(s.outboxes) != 1 || !s.outboxes[e.table] {
		t.Errorf("observer told of outboxes %v, want only %s", s.outboxes, e.table)
	}
}

// TestObserverCountsFailuresAndDead: an event the broker refuses is a
// failure at every attempt and dead after the last.
func TestObserverCountsFailuresAndDead(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.refusePoison()
	obs := &recordingObserver{}
	cfg := e.config(testenv.Name(t, "relay"))
	cfg.Observer = obs
	cfg.MaxAttempts = 3
	e.start(cfg)
	poison := event("poison-1")
	poison.Type = "poison.created"
	e.publish(poison)
	testenv.WaitFor(t, 60*time.Second, "the poison row to be dead", func() bool { return obs.snapshot().dead == 1 })
	if s := obs.snapshot(); s.failures != 3 || s.published != 0 {
		t.Errorf("failures %d, published %d; want 3 failures (one per attempt) and nothing published", s.failures, s.published)
	}
	if n := e.count(`state = 'dead'`); n != 1 {
		t.Errorf("%d dead rows in the table, want 1", n)
	}
}

// The Observer scenario both relays pass (relay/internal/observertest).
func TestObserverScenarioSharedWithTheCDCRelay(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	observertest.Run(t, e.ob, func(exchange string, obs relay.Observer, maxAttempts int) {
		cfg := e.config(testenv.Name(t, "relay"))
		cfg.Exchange, cfg.Observer, cfg.MaxAttempts = exchange, obs, maxAttempts
		cfg.StatsInterval = 50 * time.Millisecond
		e.start(cfg)
	})
}
