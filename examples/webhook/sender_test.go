package webhook

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/warrenmq/warren"
)

var secret = []byte("s3cret")

func message(t *testing.T) *warren.Message {
	t.Helper()
	body := []byte(`{"event_id":"ev-1","event_type":"workitem.updated","future_field":{"kept":true}}`)
	ev, err := warren.DecodeEvent(body)
	if err != nil {
		t.Fatal(err)
	}
	return &warren.Message{Event: ev, Body: body}
}

// The receiver sees the event's bytes, the headers it dedups and verifies
// on, and a signature Verify accepts.
func TestSendSignsAndVerifies(t *testing.T) {
	var got *http.Request
	var gotBody []byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r
		gotBody, _ = io.ReadAll(r.Body)
	}))
	defer srv.Close()
	m := message(t)
	s := &Sender{Client: srv.Client(), Secret: secret}
	if err := s.Send(context.Background(), Endpoint{URL: srv.URL}, m); err != nil {
		t.Fatal(err)
	}
	if string(gotBody) != string(m.Body) {
		t.Errorf("body %s, want the original bytes", gotBody)
	}
	for h, want := range map[string]string{"Content-Type": "application/json", HeaderEventID: "ev-1", HeaderEventType: "workitem.updated"} {
		if got.Header.Get(h) != want {
			t.Errorf("%s = %q, want %q", h, got.Header.Get(h), want)
		}
	}
	if err := Verify(secret, got.Header, gotBody, 5*time.Minute, time.Now()); err != nil {
		t.Errorf("Verify of a genuine delivery: %v", err)
	}
}

func TestVerifyRejects(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	body := []byte(`{"event_id":"x"}`)
	signed := func(ts string, b []byte, key []byte) http.Header {
		h := http.Header{}
		h.Set(HeaderEventID, "x")
		h.Set(HeaderEventType, "t")
		h.Set(HeaderTimestamp, ts)
		sig, err := Sign(key, "x", "t", ts, b)
		if err != nil { // the garbage timestamp
			sig = SchemeV2 + "00"
		}
		h.Set(HeaderSignature, sig)
		return h
	}
	cases := []struct {
		name   string
		header http.Header
		want   error
	}{
		{"unsigned", http.Header{}, ErrNoSignature},
		{"other secret", signed("1800000000", body, []byte("other")), ErrBadSignature},
		{"body changed", signed("1800000000", []byte(`{"event_id":"y"}`), secret), ErrBadSignature},
		{"too old", signed("1799999000", body, secret), ErrStale},
		{"from the future", signed("1800001000", body, secret), ErrStale},
		{"garbage timestamp", signed("soon", body, secret), ErrStale},
	}
	for _, tc := range cases {
		if err := Verify(secret, tc.header, body, 5*time.Minute, now); !errors.Is(err, tc.want) {
			t.Errorf("%s: Verify = %v, want %v", tc.name, err, tc.want)
		}
	}
	// A timestamp, id or type edited after signing breaks the signature.
	for name, value := range map[string]string{HeaderTimestamp: "1800000001", HeaderEventID: "y", HeaderEventType: "u"} {
		h := signed("1800000000", body, secret)
		h.Set(name, value)
		if err := Verify(secret, h, body, 5*time.Minute, now); !errors.Is(err, ErrBadSignature) {
			t.Errorf("%s edited after signing: %v", name, err)
		}
	}
	h := signed("1800000000", body, secret)
	h.Add(HeaderEventID, "y")
	if err := Verify(secret, h, body, 5*time.Minute, now); !errors.Is(err, ErrBadSignature) {
		t.Errorf("a second id header: %v", err)
	}
}

func TestSendClassifiesResponses(t *testing.T) {
	cases := []struct {
		status     int
		retryAfter string
		outcome    warren.Outcome
		delay      time.Duration
	}{
		{200, "", warren.OutcomeDone, 0},
		{204, "", warren.OutcomeDone, 0},
		{500, "", warren.OutcomeRetry, 0},
		{503, "", warren.OutcomeRetry, 0},
		{408, "", warren.OutcomeRetry, 0},
		{429, "30", warren.OutcomeRetry, 30 * time.Second},
		{429, "", warren.OutcomeRetry, 0},
		{400, "", warren.OutcomePermanent, 0},
		{404, "", warren.OutcomePermanent, 0},
		{410, "", warren.OutcomePermanent, 0},
	}
	for _, tc := range cases {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if tc.retryAfter != "" {
				w.Header().Set("Retry-After", tc.retryAfter)
			}
			w.WriteHeader(tc.status)
			io.WriteString(w, strings.Repeat("why ", 300))
		}))
		err := (&Sender{Client: srv.Client(), Secret: secret}).Send(context.Background(), Endpoint{URL: srv.URL}, message(t))
		srv.Close()
		outcome, delay := warren.Classify(err)
		if outcome != tc.outcome || delay != tc.delay {
			t.Errorf("status %d: %v %v (%v), want %v %v", tc.status, outcome, delay, err, tc.outcome, tc.delay)
		}
		var se *StatusError
		if tc.status >= 300 && (!errors.As(err, &se) || se.StatusCode != tc.status || len(se.Body) > maxErrorSnippet || !strings.HasPrefix(se.Body, "why")) {
			t.Errorf("status %d: error %v does not carry the status and a truncated body", tc.status, err)
		}
	}
}

func TestSendNetworkErrorsAreTransient(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-release // answer only after the client gave up
	}))
	defer srv.Close()
	defer close(release)
	client := srv.Client()
	client.Timeout = 50 * time.Millisecond
	err := (&Sender{Client: client, Secret: secret}).Send(context.Background(), Endpoint{URL: srv.URL}, message(t))
	if outcome, _ := warren.Classify(err); err == nil || outcome != warren.OutcomeRetry {
		t.Errorf("timeout gave %v (%v), want a retry", outcome, err)
	}
	err = (&Sender{Client: http.DefaultClient, Secret: secret}).Send(context.Background(), Endpoint{URL: "http://127.0.0.1:1/"}, message(t))
	if outcome, _ := warren.Classify(err); err == nil || outcome != warren.OutcomeRetry {
		t.Errorf("connection refused gave %v (%v), want a retry", outcome, err)
	}
}

func TestRetryAfterHeader(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	for v, want := range map[string]time.Duration{
		"120": 2 * time.Minute, "": 0, "soon": 0, "-5": 0,
		now.Add(90 * time.Second).Format(http.TimeFormat): 90 * time.Second,
	} {
		if got := retryAfter(v, now); got != want {
			t.Errorf("retryAfter(%q) = %v, want %v", v, got, want)
		}
	}
}
