package middleware_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/middleware"
)

func panicking(v any) warren.Handler {
	return warren.HandlerFunc(func(context.Context, *warren.Message) error { panic(v) })
}

func TestRecoverTurnsPanicIntoTransientError(t *testing.T) {
	err := middleware.Recover()(panicking("index out of range")).Handle(context.Background(), &warren.Message{})
	var pe *middleware.PanicError
	if !errors.As(err, &pe) {
		t.Fatalf("error %v (%T) is not a *PanicError", err, err)
	}
	if pe.Value != "index out of range" || err.Error() != "panic: index out of range" {
		t.Errorf("PanicError = %v / %q", pe.Value, err.Error())
	}
	// The stack shows where the handler panicked, not just where it was recovered.
	if !strings.Contains(string(pe.Stack), "panicking.func") {
		t.Errorf("stack does not show the panicking handler:\n%s", pe.Stack)
	}
	if outcome, _ := warren.Classify(err); outcome != warren.OutcomeRetry {
		t.Errorf("a panic classifies as %v, want retry", outcome)
	}
}

func TestRecoverPanicValues(t *testing.T) {
	sentinel := errors.New("pool exhausted")
	err := middleware.Recover()(panicking(sentinel)).Handle(context.Background(), &warren.Message{})
	if !errors.Is(err, sentinel) {
		t.Errorf("panic(err) does not unwrap to err: %v", err)
	}
	// A panic is transient whatever it carries.
	for _, v := range []any{warren.Permanent(sentinel), warren.Skip("no"), nil} {
		err := middleware.Recover()(panicking(v)).Handle(context.Background(), &warren.Message{})
		if outcome, _ := warren.Classify(err); outcome != warren.OutcomeRetry {
			t.Errorf("panic(%v) classifies as %v, want retry", v, outcome)
		}
	}
}

func TestRecoverPassesErrorsThrough(t *testing.T) {
	want := warren.Permanent(errors.New("410 Gone"))
	h := middleware.Recover()(warren.HandlerFunc(func(context.Context, *warren.Message) error { return want }))
	if err := h.Handle(context.Background(), &warren.Message{}); err != want {
		t.Errorf("Recover changed the error: %v", err)
	}
}
