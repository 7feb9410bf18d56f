package relay_test

import (
	"sync"
	"testing"
	"time"

	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/relay"
	"github.com/warrenmq/warren/relay/internal/relaytest"
)

// TestObserverSeesNotifyWakeups: with a poll so slow it never fires, an
// event committed while the relay waits is claimed after a notification,
// and the observer is told so.
func TestObserverSeesNotifyWakeups(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.bindQueue()
	got := consume(t, e.queue)
	obs := &relaytest.Recorder{}
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
	testenv.WaitFor(t, 60*time.Second, "the publish to be observed", func() bool { return obs.Counts().Published == 1 })
	s := obs.Counts()
	if s.WokenByNotify < 1 || s.WokenByPoll != 0 {
		t.Errorf("wake-ups: %d by notify, %d by poll; want at least one by notify and none by poll", s.WokenByNotify, s.WokenByPoll)
	}
	if s.Failures != 0 || s.Dead != 0 {
		t.Errorf("failures %d, dead %d; want none", s.Failures, s.Dead)
	}
	testenv.WaitFor(t, 60*time.Second, "stats showing the table empty", func() bool {
		st := obs.Counts().LastStats
		return st != nil && st.Pending == 0
	})
	if len(s.Outboxes) != 1 || s.Outboxes[0] != e.table {
		t.Errorf("observer told of outboxes %v, want only %s", s.Outboxes, e.table)
	}
}

// TestObserverCountsFailuresAndDead: an event the broker refuses is a
// failure at every attempt and dead after the last. The Observer, with a
// negative StatsInterval, gets no Stats, whose first reading a relay
// otherwise takes as it starts, long before three attempts are spent.
func TestObserverCountsFailuresAndDead(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.refusePoison()
	obs := &relaytest.Recorder{}
	cfg := e.config(testenv.Name(t, "relay"))
	cfg.Observer = obs
	cfg.MaxAttempts = 3
	cfg.StatsInterval = -1
	e.start(cfg)
	poison := event("poison-1")
	poison.Type = "poison.created"
	e.publish(poison)
	testenv.WaitFor(t, 60*time.Second, "the poison row to be dead", func() bool { return obs.Counts().Dead == 1 })
	if s := obs.Counts(); s.Failures != 3 || s.Published != 0 {
		t.Errorf("failures %d, published %d; want 3 failures (one per attempt) and nothing published", s.Failures, s.Published)
	}
	if n := e.count(`state = 'dead'`); n != 1 {
		t.Errorf("%d dead rows in the table, want 1", n)
	}
	if st := obs.Counts().LastStats; st != nil {
		t.Errorf("the Observer got Stats %+v with a negative StatsInterval, want none", *st)
	}
}

// The scenarios both relays pass (relay/internal/relaytest),
// an Observer that panics among them.
func TestScenariosBothRelaysPass(t *testing.T) {
	relaytest.Scenarios(t, func(t *testing.T) (*testenv.OutboxTable, relaytest.Start) {
		e := newEnv(t)
		return e.ob, func(s relaytest.Settings) {
			cfg := e.config(testenv.Name(e.t, "relay"))
			cfg.Exchange, cfg.Observer, cfg.MaxAttempts, cfg.PlaneProperties = s.Exchange, s.Observer, s.MaxAttempts, s.PlaneProperties
			if s.Logger != nil {
				cfg.Logger = s.Logger
			}
			cfg.StatsInterval = 50 * time.Millisecond
			e.start(cfg)
		}
	})
}
