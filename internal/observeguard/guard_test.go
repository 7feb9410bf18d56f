package observeguard

import (
	"log/slog"
	"runtime"
	"strings"
	"testing"

	"github.com/warrenmq/warren/internal/testenv"
)

// A panicking Observer method is recovered and logged, once per method
// within observerPanicLogEvery however often it panics; a method that
// returns is called as usual.
func TestGuardRecoversAndLimitsTheLog(t *testing.T) {
	logs := &testenv.LogBuffer{}
	g := New(slog.New(slog.NewTextHandler(logs, nil)))
	for range 3 {
		g.Call("Published", func() { panic("bug in Published") })
		g.Call("Dead", func() { panic("bug in Dead") })
	}
	called := false
	g.Call("Woken", func() { called = true })
	if !called {
		t.Error("a method that returns was not called")
	}
	for _, method := range []string{"Published", "Dead"} {
		if n := strings.Count(logs.String(), "method="+method+" "); n != 1 {
			t.Errorf("%s's panics logged %d times, want once within %v:\n%s", method, n, observerPanicLogEvery, logs)
		}
	}
	if g.panics["Published"].unlogged != 2 {
		t.Errorf("%d of Published's panics counted as not logged, want 2", g.panics["Published"].unlogged)
	}
	if !strings.Contains(logs.String(), "stack=") {
		t.Errorf("no stack in the log:\n%s", logs)
	}
}

// selfPanic's String panics with itself: formatting it for the log must
// not panic again, past the guard.
type selfPanic struct{}

func (selfPanic) String() string { panic(selfPanic{}) }

// Panics that are hard to describe are recovered and logged all the same:
// a value whose String panics, a huge value (cut), and a Goexit, which no
// recover stops but which must not pass in silence.
func TestGuardSurvivesOddPanics(t *testing.T) {
	logs := &testenv.LogBuffer{}
	g := New(slog.New(slog.NewTextHandler(logs, nil)))
	g.Call("Published", func() { panic(selfPanic{}) })
	if !strings.Contains(logs.String(), "a observeguard.selfPanic whose text cannot be formatted") {
		t.Errorf("a self-panicking value was not described by its type:\n%s", logs)
	}
	g.Call("Dead", func() { panic(strings.Repeat("x", 1<<20)) })
	if n := len(logs.String()); n > 64<<10 {
		t.Errorf("a 1 MiB panic value made %d bytes of log", n)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		g.Call("Woken", runtime.Goexit)
		t.Error("Goexit was stopped")
	}()
	<-done
	if !strings.Contains(logs.String(), "method=Woken") || !strings.Contains(logs.String(), "runtime.Goexit") {
		t.Errorf("a Goexit was not logged:\n%s", logs)
	}
}
