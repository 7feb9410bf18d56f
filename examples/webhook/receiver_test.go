package webhook

import (
	"bytes"
	"context"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
)

// Concurrent deliveries of one event (a retry racing a slow first attempt,
// a replayed capture) are processed once: while the first is being
// processed the others are answered with a status the sender retries, and
// once it is accepted a retry is a duplicate, answered 200 without
// processing.
func TestReceiverProcessesConcurrentDuplicatesOnce(t *testing.T) {
	const n = 8
	release := make(chan struct{})
	var calls atomic.Int32
	r := &Receiver{Secret: secret, Answer: func(string, []byte, int) int {
		if calls.Add(1) == 1 {
			<-release // the first call holds the event until the others are answered
		}
		return http.StatusOK
	}}
	srv := httptest.NewServer(r)
	defer srv.Close()
	defer close(release)
	d := capture(t, &Sender{Secret: secret}, message(t))

	statuses := make(chan int, n)
	for range n {
		go func() { statuses <- postConcurrently(t, srv.URL, d) }()
	}
	// Every delivery but the one in Answer is answered while it holds.
	for range n - 1 {
		if status := <-statuses; status != http.StatusServiceUnavailable {
			t.Errorf("a concurrent duplicate was answered %d, want 503", status)
		}
	}
	// The sender takes that answer as a reason to retry, not to give up.
	err := (&Sender{Secret: secret}).Send(context.Background(), Endpoint{URL: srv.URL}, message(t))
	if err == nil || IsPermanent(err) {
		t.Errorf("Send while the event is being processed: %v, want a transient failure", err)
	}
	release <- struct{}{}
	if status := <-statuses; status != http.StatusOK {
		t.Fatalf("the first delivery was answered %d, want 200", status)
	}
	if status := post(t, srv.URL, d, nil); status != http.StatusOK {
		t.Errorf("a retry after acceptance was answered %d, want 200", status)
	}
	if got := calls.Load(); got != 1 {
		t.Errorf("Answer was called %d times for one event, want once", got)
	}
}

// A delivery that was not accepted is processed again when retried: the
// in-progress mark goes with the failed answer, even one that panicked.
func TestReceiverProcessesARetryAfterAFailure(t *testing.T) {
	var calls atomic.Int32
	r := &Receiver{Secret: secret, Answer: func(string, []byte, int) int {
		switch calls.Add(1) {
		case 1:
			return http.StatusServiceUnavailable
		case 2:
			panic("the receiver's handler crashed")
		}
		return http.StatusOK
	}}
	srv := httptest.NewUnstartedServer(r)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the panic's stack
	srv.Start()
	defer srv.Close()
	d := capture(t, &Sender{Secret: secret}, message(t))

	if status := post(t, srv.URL, d, nil); status != http.StatusServiceUnavailable {
		t.Fatalf("first delivery answered %d, want Answer's 503", status)
	}
	if status := postConcurrently(t, srv.URL, d); status != 0 {
		t.Fatalf("second delivery answered %d, want the connection dropped by the panic", status)
	}
	if status := post(t, srv.URL, d, nil); status != http.StatusOK || calls.Load() != 3 {
		t.Fatalf("third delivery answered %d after %d calls, want 200 after 3", status, calls.Load())
	}
}

// postConcurrently is post for a goroutine: it reports a failed request
// with t.Error and returns status 0.
func postConcurrently(t *testing.T, url string, d delivery) int {
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(d.body))
	if err != nil {
		t.Error(err)
		return 0
	}
	req.Header = d.header.Clone()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}
