package amqpx

import (
	"testing"
	"time"
)

// A session is stale only after every verdict for the whole limit was a
// nack; one confirm starts the count again.
func TestNackStreak(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	var s NackStreak
	if _, stale := s.Stale(at(100), NackedSessionLimit); stale {
		t.Fatal("a session with no verdict is stale")
	}
	s.Record(true, at(0))
	s.Record(true, at(3))
	if _, stale := s.Stale(at(4.9), NackedSessionLimit); stale {
		t.Error("stale before the limit")
	}
	if d, stale := s.Stale(at(5), NackedSessionLimit); !stale || d != 5*time.Second {
		t.Errorf("nacked since 0s, at 5s: stale %v after %v, want true after 5s", stale, d)
	}
	s.Record(false, at(5.5)) // a confirm: the channel serves
	if _, stale := s.Stale(at(20), NackedSessionLimit); stale {
		t.Error("stale after a confirm and no nack since")
	}
	s.Record(true, at(21))
	if _, stale := s.Stale(at(25), NackedSessionLimit); stale {
		t.Error("the streak counts from before the confirm")
	}
	if _, stale := s.Stale(at(26), NackedSessionLimit); !stale {
		t.Error("not stale 5s into a new streak")
	}
	s.Reset()
	if _, stale := s.Stale(at(60), NackedSessionLimit); stale {
		t.Error("stale after reset (a new session)")
	}
}
