package console

import (
	"net/http/httptest"
	"strconv"
	"testing"
	"time"
)

// An IPv6 client is limited by its /64, which it usually has whole; IPv4
// by its address.
func TestClientAddress(t *testing.T) {
	t.Parallel()
	for remote, want := range map[string]string{
		"192.0.2.7:5000":                 "192.0.2.7",
		"[2001:db8:1:2:aaaa::1]:5000":    "2001:db8:1:2::/64",
		"[2001:db8:1:2:bbbb:cc::9]:6000": "2001:db8:1:2::/64",
		"[::1]:80":                       "::/64",
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = remote
		if got := clientAddress(r); got != want {
			t.Errorf("clientAddress(%s) = %q, want %q", remote, got, want)
		}
	}
}

// Addresses beyond the limit never wipe the lockouts: with every address
// remembered locked out, new addresses share one window, locked out like
// any after five tries, and the locked-out ones stay locked out.
func TestLimiterKeepsLockoutsWhenFull(t *testing.T) {
	t.Parallel()
	l := newLoginLimiter()
	now := time.Now()
	l.now = func() time.Time { return now }
	for i := range loginClients {
		for range loginFailures {
			l.attempt("10.0." + strconv.Itoa(i))
		}
	}
	if _, _, ok := l.attempt("10.0.0"); ok {
		t.Fatal("a locked-out address was let try again")
	}
	for i := range loginFailures {
		if _, counted, ok := l.attempt("192.0.2." + strconv.Itoa(i)); !ok || !counted {
			t.Fatalf("new address %d with the limiter full: ok %v, counted %v; want let through, counted", i, ok, counted)
		}
	}
	if _, _, ok := l.attempt("198.51.100.1"); ok {
		t.Fatal("new addresses together were let try more than the limit")
	}
	if _, _, ok := l.attempt("10.0.9999"); ok {
		t.Fatal("a lockout was wiped to make room")
	}
	now = now.Add(loginWindow)
	if _, _, ok := l.attempt("198.51.100.1"); !ok {
		t.Fatal("a new address was refused after the window ended")
	}
}

// A right secret takes back only its own try: the wrong ones sent from the
// same address (another client behind the same proxy) still count.
func TestRightSecretTakesBackOnlyItsTry(t *testing.T) {
	t.Parallel()
	l := newLoginLimiter()
	for range loginFailures - 1 {
		l.attempt("192.0.2.1") // wrong
	}
	_, counted, _ := l.attempt("192.0.2.1") // right
	l.succeeded("192.0.2.1", counted)
	if _, _, ok := l.attempt("192.0.2.1"); !ok {
		t.Fatal("the fifth try was refused although one of five was right")
	}
	if _, _, ok := l.attempt("192.0.2.1"); ok {
		t.Fatal("a sixth try passed: the right one wiped the wrong ones")
	}
}

// A value put again moves to the back of the store's order: beyond max,
// the least recently put goes, not the first ever put.
func TestStoreDropsTheLeastRecentlyPut(t *testing.T) {
	t.Parallel()
	s := newStore[int](2, time.Hour)
	s.putAt("a", 1)
	s.putAt("b", 2)
	s.putAt("a", 3) // a again: b is now the oldest
	s.putAt("c", 4)
	if _, ok := s.get("b"); ok {
		t.Error("b, the least recently put, was kept")
	}
	if v, ok := s.get("a"); !ok || v != 3 {
		t.Errorf("a = %v, %v; want 3, kept", v, ok)
	}
	if v, ok := s.take("c"); !ok || v != 4 {
		t.Errorf("take c = %v, %v", v, ok)
	}
	if _, ok := s.get("c"); ok {
		t.Error("c is still there after take")
	}
}
