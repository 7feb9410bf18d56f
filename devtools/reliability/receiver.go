package main

import (
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/examples/webhook"
)

// acceptance is one delivery the receiver answered 2xx.
type acceptance struct {
	at     time.Time
	poster string        // the webhook replica that posted it
	held   time.Duration // how long the receiver held the request before its answer (a slow receiver's delay, and any wait for the CPU)
}

// receiver is the webhook endpoint and the ledger of the webhook's effect:
// it verifies each delivery as a real receiver would, and records which
// event ids it accepted, when, and from which replica (see posterOf),
// which is how a duplicate is traced to the process that caused it.
//
// It can be told to fail (503) or to answer slowly for a while. A slow
// answer whose client gave up first is not counted as accepted: the sender
// saw a timeout, so the delivery did not happen as far as it knows.
type receiver struct {
	secret []byte

	mu         sync.Mutex
	accepted   map[string][]acceptance
	events     map[string]warren.Event // the first accepted body per id
	refused    int                     // 503s during a failure window
	abandoned  int                     // slow answers the client gave up on
	forged     int                     // bad signatures
	mismatched int                     // header id differs from body id
	failUntil  time.Time
	refuseOnce map[string]bool // ids answered 503 on their next delivery
	slowUntil  time.Time
	slowMax    time.Duration
	onAccept   func(id string, at time.Time)
	// afterAccept, when set, is called once, for the next delivery from
	// poster that is accepted, after it is recorded and before the 200 is
	// written: the moment to kill the poster between its effect and its
	// done-mark.
	afterAccept func(poster string) bool
}

func newReceiver(secret []byte) *receiver {
	return &receiver{secret: secret, accepted: map[string][]acceptance{}, events: map[string]warren.Event{}}
}

// failFor answers 503 to every delivery for d.
func (r *receiver) failFor(d time.Duration) {
	r.mu.Lock()
	r.failUntil = time.Now().Add(d)
	r.mu.Unlock()
}

// failOnce answers 503 to the next delivery of each id: a handler that
// fails once for these events.
func (r *receiver) failOnce(ids ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.refuseOnce == nil {
		r.refuseOnce = map[string]bool{}
	}
	for _, id := range ids {
		r.refuseOnce[id] = true
	}
}

// slowFor delays every answer by a random time up to max, for d.
func (r *receiver) slowFor(d, max time.Duration) {
	r.mu.Lock()
	r.slowUntil, r.slowMax = time.Now().Add(d), max
	r.mu.Unlock()
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	arrived := time.Now()
	body, err := io.ReadAll(io.LimitReader(req.Body, 16<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if err := webhook.Verify(r.secret, req.Header, body, 5*time.Minute, time.Now()); err != nil {
		r.mu.Lock()
		r.forged++
		r.mu.Unlock()
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	id := req.Header.Get(webhook.HeaderEventID)
	ev, decodeErr := warren.DecodeEvent(body)
	now := time.Now()
	r.mu.Lock()
	failing := now.Before(r.failUntil) || r.refuseOnce[id]
	delete(r.refuseOnce, id)
	var delay time.Duration
	if now.Before(r.slowUntil) && r.slowMax > 0 {
		delay = rand.N(r.slowMax)
	}
	if decodeErr != nil || ev.ID != id {
		r.mismatched++
	}
	r.mu.Unlock()
	if failing {
		r.mu.Lock()
		r.refused++
		r.mu.Unlock()
		http.Error(w, "reliability: failing on purpose", http.StatusServiceUnavailable)
		return
	}
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-req.Context().Done():
			r.mu.Lock()
			r.abandoned++
			r.mu.Unlock()
			return
		}
	}
	if req.Context().Err() != nil {
		r.mu.Lock()
		r.abandoned++
		r.mu.Unlock()
		return
	}
	at := time.Now()
	r.mu.Lock()
	r.accepted[id] = append(r.accepted[id], acceptance{at: at, poster: posterFrom(req.Context()), held: at.Sub(arrived)})
	if _, ok := r.events[id]; !ok && decodeErr == nil {
		r.events[id] = ev
	}
	onAccept, afterAccept := r.onAccept, r.afterAccept
	r.mu.Unlock()
	if afterAccept != nil {
		r.mu.Lock()
		// Claim the hook before calling it, so it fires once.
		if r.afterAccept != nil && afterAccept(posterFrom(req.Context())) {
			r.afterAccept = nil
		}
		r.mu.Unlock()
	}
	w.WriteHeader(http.StatusOK)
	if onAccept != nil {
		onAccept(id, at)
	}
}

// snapshot copies the acceptances.
func (r *receiver) snapshot() (map[string][]acceptance, map[string]warren.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	acc := make(map[string][]acceptance, len(r.accepted))
	for id, a := range r.accepted {
		acc[id] = append([]acceptance(nil), a...)
	}
	evs := make(map[string]warren.Event, len(r.events))
	for id, e := range r.events {
		evs[id] = e
	}
	return acc, evs
}

// hasAll reports whether every id was accepted.
func (r *receiver) hasAll(ids []string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, id := range ids {
		if len(r.accepted[id]) == 0 {
			return false
		}
	}
	return true
}

// has reports whether id was accepted.
func (r *receiver) has(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.accepted[id]) > 0
}
