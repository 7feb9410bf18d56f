package observeguard

import (
	"fmt"
	"log/slog"
	"runtime/debug"
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
// in it.
func (g *Guard) Call(method string, call func()) {
	defer func() {
		if v := recover(); v != nil {
			g.panicked(method, v)
		}
	}()
	call()
}

func (g *Guard) panicked(method string, v any) {
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
		"method", method, "panic", fmt.Sprint(v), "panics_not_logged", unlogged, "stack", string(debug.Stack()))
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
