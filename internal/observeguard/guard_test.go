package observeguard

import (
	"log/slog"
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
