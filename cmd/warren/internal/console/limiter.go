package console

import (
	"net"
	"net/http"
	"sync"
	"time"
)

// The limit on guessing: loginFailures tries within loginWindow of the
// first, from one address, and that address is refused until the window
// ends.
const (
	loginFailures = 5
	loginWindow   = time.Minute
	// loginClients bounds the addresses remembered. When it is reached,
	// windows that ended are forgotten, then addresses not locked out; if
	// every one is locked out, new addresses share one window of their
	// own. Lockouts are never wiped: whoever holds ten thousand addresses
	// (an IPv6 /48 is 65,536 /64s) buys five more tries a minute, not
	// unlimited ones; the price is that, while they keep the table full,
	// someone logging in from a new address shares that window (sessions
	// already started still pass).
	loginClients = 10000
)

// loginLimiter counts tries of a secret (a token, a password) by client
// address. A try is counted before the secret is checked and taken back
// if it was right, so that requests sent at once cannot all pass the
// check before any failure is counted, and a right one does not wipe the
// wrong ones another client sent from the same address (a proxy's).
type loginLimiter struct {
	mu       sync.Mutex
	now      func() time.Time // time.Now; a test moves it on
	by       map[string]*loginWindowState
	overflow loginWindowState // the addresses not remembered, together
}

type loginWindowState struct {
	tries int
	ends  time.Time
}

func newLoginLimiter() *loginLimiter {
	return &loginLimiter{now: time.Now, by: map[string]*loginWindowState{}}
}

// attempt counts a try from client, or refuses it, saying how long until
// client may try again. Pass what it returns as counted to succeeded.
func (l *loginLimiter) attempt(client string) (wait time.Duration, counted, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	w, known := l.by[client]
	switch {
	case known:
	case l.makeRoom(now):
		w = &loginWindowState{}
		l.by[client] = w
	default:
		w = &l.overflow
	}
	if now.Before(w.ends) && w.tries >= loginFailures {
		return w.ends.Sub(now), false, false
	}
	if !now.Before(w.ends) {
		*w = loginWindowState{ends: now.Add(loginWindow)}
	}
	w.tries++
	return 0, true, true
}

// makeRoom reports whether a new address can be remembered, forgetting
// ended windows, then addresses not locked out, when the limit is reached.
func (l *loginLimiter) makeRoom(now time.Time) bool {
	for _, forget := range []func(*loginWindowState) bool{
		func(w *loginWindowState) bool { return !now.Before(w.ends) },
		func(w *loginWindowState) bool { return w.tries < loginFailures },
	} {
		if len(l.by) < loginClients {
			return true
		}
		for c, w := range l.by {
			if forget(w) {
				delete(l.by, c)
			}
		}
	}
	return len(l.by) < loginClients
}

// succeeded takes back a try attempt counted: the secret was right.
func (l *loginLimiter) succeeded(client string, counted bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	w, known := l.by[client]
	if !known {
		w = &l.overflow
	}
	if counted && w.tries > 0 {
		w.tries--
	}
}

// clientAddress is the address a request came from, without its port; an
// IPv6 address stands for its /64, which one client usually has whole. A
// proxy in front makes every client its address: they share one limit.
func clientAddress(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	if ip := net.ParseIP(host); ip != nil && ip.To4() == nil {
		return ip.Mask(net.CIDRMask(64, 128)).String() + "/64"
	}
	return host
}
