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
// A delivery of an id that is being processed at that moment (a concurrent
// duplicate) is answered 503 with Retry-After, not processed: the sender
// retries it, and by then the first delivery's answer decides (2xx: a
// duplicate, answered 200; otherwise processed again).
//
// The demo and the end-to-end test use it; copy it as the start of your
// own. Its sets of ids are in memory: per process and lost on restart, so
// two replicas, or one restarted, process a duplicate again. A real
// receiver keeps them in a store shared by its replicas (the in-progress
// mark with a lease, the accepted ids for at least the Tolerance).
type Receiver struct {
	Secret []byte
	// Tolerance is the accepted age of a delivery's timestamp. Default 5m.
	Tolerance time.Duration
	// Answer processes a verified delivery that is not a duplicate and
	// decides its status, given the event id, the body and how many times
	// this id was delivered before. Default 200.
	Answer func(eventID string, body []byte, seen int) int

	mu         sync.Mutex
	accepted   map[string]int      // event id → 2xx answers
	attempts   map[string]int      // event id → deliveries of any outcome
	processing map[string]struct{} // event ids whose Answer is running
	forged     int
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
	// Deciding whether to process and marking the id in progress happen in
	// one critical section: otherwise two concurrent deliveries of one id
	// could both find it unaccepted and both be processed.
	r.mu.Lock()
	if r.attempts == nil {
		r.attempts, r.accepted, r.processing = map[string]int{}, map[string]int{}, map[string]struct{}{}
	}
	seen, duplicate := r.attempts[id], r.accepted[id] > 0
	_, busy := r.processing[id]
	r.attempts[id]++
	switch {
	case busy:
		r.mu.Unlock()
		// Whether this id will be accepted is not known yet: ask for a
		// retry. Not a 409, which the sender takes as a refusal for good.
		w.Header().Set("Retry-After", "1")
		http.Error(w, "this event is being processed; retry later", http.StatusServiceUnavailable)
		return
	case duplicate:
		r.accepted[id]++
		r.mu.Unlock()
		w.WriteHeader(http.StatusOK)
		return
	}
	r.processing[id] = struct{}{}
	r.mu.Unlock()
	w.WriteHeader(r.process(id, body, seen))
}

// process runs Answer for a delivery marked in progress. It removes the
// mark and records a 2xx as accepted in one critical section, so that no
// retry slips between the two and is processed again; it removes the mark
// after a panic too, so that a failed delivery can be retried.
func (r *Receiver) process(id string, body []byte, seen int) (status int) {
	status = http.StatusInternalServerError // if Answer panics
	defer func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		delete(r.processing, id)
		if status >= 200 && status < 300 {
			r.accepted[id]++
		}
	}()
	if r.Answer == nil {
		return http.StatusOK
	}
	return r.Answer(id, body, seen)
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
