package webhook

import (
	"io"
	"maps"
	"net/http"
	"sync"
	"time"
)

// Receiver is a webhook endpoint that does what a receiver should: it
// verifies each delivery's v2 signature and timestamp with its own secret,
// and deduplicates on the signed event id (X-Warren-Event-Id, trusted only
// once Verify passed): a delivery of an id it already accepted is answered
// 200 again without being processed, so a replayed capture does nothing.
// The demo and the end-to-end test use it; copy it as the start of your
// own (a real one keeps its accepted ids in a store, for at least the
// Tolerance).
type Receiver struct {
	Secret []byte
	// Tolerance is the accepted age of a delivery's timestamp. Default 5m.
	Tolerance time.Duration
	// Answer processes a verified delivery that is not a duplicate and
	// decides its status, given the event id, the body and how many times
	// this id was delivered before. Default 200.
	Answer func(eventID string, body []byte, seen int) int

	mu       sync.Mutex
	accepted map[string]int // event id → 2xx answers
	attempts map[string]int // event id → deliveries of any outcome
	forged   int
}

func (r *Receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(io.LimitReader(req.Body, 10<<20))
	if err != nil {
		http.Error(w, "read body: "+err.Error(), http.StatusBadRequest)
		return
	}
	tolerance := r.Tolerance
	if tolerance == 0 {
		tolerance = 5 * time.Minute
	}
	if err := Verify(r.Secret, req.Header, body, tolerance, time.Now()); err != nil {
		r.mu.Lock()
		r.forged++
		r.mu.Unlock()
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	id := req.Header.Get(HeaderEventID) // signed: Verify passed
	r.mu.Lock()
	if r.attempts == nil {
		r.attempts, r.accepted = map[string]int{}, map[string]int{}
	}
	seen, duplicate := r.attempts[id], r.accepted[id] > 0
	r.attempts[id]++
	r.mu.Unlock()

	status := http.StatusOK
	if r.Answer != nil && !duplicate {
		status = r.Answer(id, body, seen)
	}
	if status >= 200 && status < 300 {
		r.mu.Lock()
		r.accepted[id]++
		r.mu.Unlock()
	}
	w.WriteHeader(status)
}

// Accepted returns, per event id, how many deliveries were answered 2xx,
// duplicates included. Exactly-once delivery shows as every count being 1.
func (r *Receiver) Accepted() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.accepted)
}

// Attempts returns, per event id, how many deliveries arrived with a valid
// signature, whatever the answer.
func (r *Receiver) Attempts() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.attempts)
}

// Forged counts deliveries refused for a bad or missing signature.
func (r *Receiver) Forged() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.forged
}
