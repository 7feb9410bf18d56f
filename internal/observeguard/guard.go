package observeguard

import (
	"fmt"
	"log/slog"
	"runtime/debug"
	"strings"
	"sync"
	"time"
)

// observerPanicLogEvery is how often at most a panic in one Observer
// method is logged with its stack; panics in between are counted and the
// count is logged with the next. A panic on every publish would otherwise
// write a stack trace per row.
const observerPanicLogEvery = 10 * time.Second

// Guard runs calls to an Observer so that a panic in one is logged and
// its caller goes on (see the package documentation for why). Use New.
type Guard struct {
	log *slog.Logger

	mu     sync.Mutex
	panics map[string]*panicLog // by Observer method
}

// panicLog is what the guard logged of one Observer method's panics.
type panicLog struct {
	last     time.Time // when a panic was last logged
	unlogged int       // panics since then, not logged
}

// New returns a Guard that logs an Observer's panics to log.
func New(log *slog.Logger) *Guard {
	return &Guard{log: log, panics: map[string]*panicLog{}}
}

// Call runs call, an Observer method named method, and recovers a panic
// in it. A call that neither returns nor panics called runtime.Goexit
// (t.FailNow in a test double, say), which no recover stops: the calling
// goroutine ends with it, so it is logged at Error, not left silent. So
// is a panic(nil) that recover cannot tell from no panic
// (GODEBUG=panicnil=1).
func (g *Guard) Call(method string, call func()) {
	returned := false
	defer func() {
		switch v := recover(); {
		case v != nil:
			g.panicked(method, describe(v))
		case !returned:
			g.panicked(method, "the Observer panicked with nil or called runtime.Goexit; after a Goexit this goroutine of the relay or consumer ends")
		}
	}()
	call()
	returned = true
}

// maxPanicText is the most bytes of a panic's value that are logged.
const maxPanicText = 4 << 10

// describe is v as text for the log, at most maxPanicText bytes. A value
// whose String or Error method panics (with itself, even) is described by
// its type: formatting it here must not panic again, past the guard.
func describe(v any) (text string) {
	defer func() {
		if recover() != nil {
			text = fmt.Sprintf("a %T whose text cannot be formatted", v)
		}
	}()
	text = fmt.Sprint(v)
	if len(text) > maxPanicText {
		text = strings.ToValidUTF8(text[:maxPanicText], "") + "…"
	}
	return text
}

func (g *Guard) panicked(method, text string) {
	g.mu.Lock()
	p := g.panics[method]
	if p == nil {
		p = &panicLog{}
		g.panics[method] = p
	}
	now := time.Now()
	if !p.last.IsZero() && now.Sub(p.last) < observerPanicLogEvery {
		p.unlogged++
		g.mu.Unlock()
		return
	}
	unlogged := p.unlogged
	p.last, p.unlogged = now, 0
	g.mu.Unlock()
	g.log.Error("the Observer panicked; going on without that report",
		"method", method, "panic", text, "panics_not_logged", unlogged, "stack", string(debug.Stack()))
}

// blockObserver is the method set of relay.BlockObserver and
// consumer.BlockObserver, which cannot be named here.
type blockObserver interface {
	Blocked(outbox, reason string)
	Unblocked(outbox string)
}

// ObserveBlocked tells observer (a relay's or a consumer's Observer, nil
// allowed) that the broker blocked (blocked, with its reason) or unblocked
// the connection of name (the relay's outbox, the consumer), if it
// implements their BlockObserver.
func (g *Guard) ObserveBlocked(observer any, name string, blocked bool, reason string) {
	o, ok := observer.(blockObserver)
	switch {
	case !ok:
	case blocked:
		g.Call("Blocked", func() { o.Blocked(name, reason) })
	default:
		g.Call("Unblocked", func() { o.Unblocked(name) })
	}
}
