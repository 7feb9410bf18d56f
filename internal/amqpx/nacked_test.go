package amqpx

import (
	"fmt"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

// A destination's streak forms when two of its nacks come within the
// limit of each other, and then lasts, whatever the gaps, until its own
// confirm or a reset; a session is stale once a streak spans the limit
// and its last nack is recent. Silence after one nack spans nothing.
func TestNackStreak(t *testing.T) {
	t.Parallel()
	var s NackStreak
	q := Destination("x", "q")
	stale := func(now float64) bool { _, st := s.Stale(at(now), NackedSessionLimit); return st }
	if stale(100) {
		t.Fatal("a session with no verdict is stale")
	}
	s.Record(q, true, at(0))
	if stale(5) || stale(60) {
		t.Error("one nack, then silence, is stale")
	}
	s.Record(q, true, at(3))
	s.Record(q, true, at(4.9))
	if stale(5) {
		t.Error("stale before the nacks span the limit")
	}
	s.Record(q, true, at(5))
	if d, st := s.Stale(at(5), NackedSessionLimit); !st || d != 5*time.Second {
		t.Errorf("nacked from 0s to 5s: stale %v after %v, want true after 5s", st, d)
	}
	if stale(10.5) {
		t.Error("a streak whose last nack is past the limit is still stale")
	}
	s.Record(q, true, at(20)) // after 15s of silence: the same streak
	if !stale(20) {
		t.Error("a formed streak ended by a silence, with no confirm")
	}
	s.Record(q, false, at(25.5)) // a confirm: the channel serves q
	s.Record(q, true, at(26))
	s.Record(q, true, at(30))
	if stale(30) {
		t.Error("the streak counts from before the confirm")
	}
	s.Reset()
	s.Record(q, true, at(31))
	if stale(31) {
		t.Error("the streak counts from before the reset (a new session)")
	}
}

// A single nack then a silence longer than the limit forms nothing: the
// next nack starts afresh, so a quiet refused event retried minutes apart
// never ends the session.
func TestNackStreakOneNackPerSilenceNeverStale(t *testing.T) {
	t.Parallel()
	var s NackStreak
	q := Destination("x", "q")
	for i := range 10 {
		now := at(float64(i) * 60)
		s.Record(q, true, now)
		if _, st := s.Stale(now, NackedSessionLimit); st {
			t.Fatalf("nacks a minute apart made the session stale at nack %d", i+1)
		}
	}
}

// Nacks whose gaps double past the limit (a refused event's retries with
// the relay's jitter) still end the session once two came close: the
// first retries fall within the limit, the later ones do not.
func TestNackStreakGrowingGapsStillEndTheSession(t *testing.T) {
	t.Parallel()
	var s NackStreak
	q := Destination("x", "q")
	now := 0.0
	for _, gap := range []float64{0.5, 1, 2, 0, 7.9} { // spans 3.5s, then a gap over the limit
		now += gap
		s.Record(q, true, at(now))
	}
	if _, st := s.Stale(at(now), NackedSessionLimit); !st {
		t.Fatal("a streak spanning the limit across growing gaps is not stale")
	}
}

// RabbitMQ's post-election refusal is per channel and queue: confirms
// for another destination say nothing of the stuck one, and do not end
// its streak.
func TestNackStreakIsPerDestination(t *testing.T) {
	t.Parallel()
	var s NackStreak
	stuck, healthy := Destination("x", "stuck"), Destination("x", "healthy")
	for ms := 0; ms <= 5_000; ms += 200 {
		s.Record(stuck, true, at(float64(ms)/1000))
		s.Record(healthy, false, at(float64(ms)/1000+0.001))
	}
	if _, st := s.Stale(at(5.001), NackedSessionLimit); !st {
		t.Fatal("a destination nacked for the limit is hidden by another destination's confirms")
	}
	s.Record(stuck, false, at(5.1))
	if _, st := s.Stale(at(5.1), NackedSessionLimit); st {
		t.Fatal("stale after the stuck destination's own confirm")
	}
}

// The record is bounded: a session publishing to more destinations than
// it tracks forgets the one nacked longest ago, and the newest still
// count.
func TestNackStreakBounded(t *testing.T) {
	t.Parallel()
	var s NackStreak
	for i := range 3 * maxNackDestinations {
		s.Record(fmt.Sprint(i), true, at(float64(i)/1000))
	}
	if len(s.dests) != maxNackDestinations {
		t.Fatalf("%d destinations tracked, want at most %d", len(s.dests), maxNackDestinations)
	}
	last := fmt.Sprint(3*maxNackDestinations - 1)
	s.Record(last, true, at(1))
	s.Record(last, true, at(6))
	if _, st := s.Stale(at(6), NackedSessionLimit); !st {
		t.Fatal("the newest destination's streak was forgotten")
	}
}
