package middleware_test

import (
	"context"
	"strings"
	"testing"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/middleware"
)

// trace is a middleware that records when a message passes it on the way
// in and on the way out.
func trace(log *[]string, name string) warren.Middleware {
	return func(next warren.Handler) warren.Handler {
		return warren.HandlerFunc(func(ctx context.Context, m *warren.Message) error {
			*log = append(*log, name+">")
			err := next.Handle(ctx, m)
			*log = append(*log, "<"+name)
			return err
		})
	}
}

func TestChainFirstIsOutermost(t *testing.T) {
	var log []string
	mws := []warren.Middleware{trace(&log, "a"), trace(&log, "b"), trace(&log, "c")}
	chain := middleware.Chain(mws...)
	mws[0], mws[2] = mws[2], mws[0] // the chain keeps the order it was given
	h := chain(warren.HandlerFunc(func(context.Context, *warren.Message) error {
		log = append(log, "handler")
		return nil
	}))
	if err := h.Handle(context.Background(), &warren.Message{}); err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(log, " "), "a> b> c> handler <c <b <a"; got != want {
		t.Errorf("order = %q, want %q", got, want)
	}
}

func TestChainOfNothingIsTheHandler(t *testing.T) {
	called := false
	h := middleware.Chain()(warren.HandlerFunc(func(context.Context, *warren.Message) error {
		called = true
		return warren.Skip("mine")
	}))
	if err := h.Handle(context.Background(), &warren.Message{}); !called || err == nil || err.Error() != "skipped: mine" {
		t.Errorf("Chain() changed the handler: called %v, err %v", called, err)
	}
}

func TestChainRejectsNil(t *testing.T) {
	mustPanic(t, "middleware 2 of 2 is nil", func() { middleware.Chain(middleware.Recover(), nil) })
}

// mustPanic fails t unless f panics with a message containing want.
func mustPanic(t *testing.T, want string, f func()) {
	t.Helper()
	defer func() {
		t.Helper()
		v := recover()
		if v == nil {
			t.Fatalf("did not panic; want a panic saying %q", want)
		}
		if msg, _ := v.(string); !strings.Contains(msg, want) {
			t.Fatalf("panic %v does not say %q", v, want)
		}
	}()
	f()
}
