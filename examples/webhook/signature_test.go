package webhook

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/internal/testenv"
)

// delivery is a request as an eavesdropper captured it.
type delivery struct {
	header http.Header
	body   []byte
}

// capture returns what sender posts for m: the headers and body a
// man-in-the-middle or a log of the receiver would hold.
func capture(t *testing.T, s *Sender, m *warren.Message) delivery {
	t.Helper()
	var got delivery
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.header = r.Header.Clone()
		got.body, _ = io.ReadAll(r.Body)
	}))
	defer srv.Close()
	if err := s.Send(context.Background(), Endpoint{URL: srv.URL}, m); err != nil {
		t.Fatal(err)
	}
	return got
}

// post replays d to url, with edit applied to a copy of its headers, and
// returns the status.
func post(t *testing.T, url string, d delivery, edit func(http.Header)) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(d.body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = d.header.Clone()
	if edit != nil {
		edit(req.Header)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// processing is a Receiver whose Answer records the ids it processed.
func processing(t *testing.T, key []byte) (url string, processed func() []string) {
	var mu sync.Mutex
	var ids []string
	r := &Receiver{Secret: key, Answer: func(id string, _ []byte, _ int) int {
		mu.Lock()
		defer mu.Unlock()
		ids = append(ids, id)
		return http.StatusOK
	}}
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return srv.URL, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), ids...)
	}
}

// A captured delivery re-sent with another X-Warren-Event-Id must not pass
// as a new event, and re-sent as it was it must not be processed twice.
func TestReceiverRefusesReplays(t *testing.T) {
	d := capture(t, &Sender{Secret: secret}, message(t))
	url, processed := processing(t, secret)

	if status := post(t, url, d, nil); status != http.StatusOK {
		t.Fatalf("genuine delivery answered %d", status)
	}
	if status := post(t, url, d, nil); status != http.StatusOK {
		t.Errorf("identical replay answered %d, want 200 (a duplicate, already accepted)", status)
	}
	status := post(t, url, d, func(h http.Header) { h.Set(HeaderEventID, "ev-forged") })
	if status != http.StatusUnauthorized {
		t.Errorf("replay with a new event id answered %d, want 401", status)
	}
	if got := processed(); len(got) != 1 || got[0] != "ev-1" {
		t.Errorf("processed %q, want ev-1 once", got)
	}

	// A capture older than the tolerance is refused outright.
	old := capture(t, &Sender{Secret: secret, Now: func() time.Time { return time.Now().Add(-10 * time.Minute) }}, message(t))
	if status := post(t, url, old, nil); status != http.StatusUnauthorized {
		t.Errorf("a 10-minute-old delivery answered %d, want 401", status)
	}
}

// Each endpoint signs with its own secret: what endpoint A receives cannot
// be replayed to endpoint B.
func TestEndpointsSignWithTheirOwnSecrets(t *testing.T) {
	keyA, keyB := []byte("secret-of-a"), []byte("secret-of-b")
	urlA, processedA := processing(t, keyA)
	urlB, processedB := processing(t, keyB)
	s, err := New(Config{Endpoints: []Endpoint{{URL: urlA, Secret: keyA}, {URL: urlB, Secret: keyB}}, Secret: []byte("default")}, testenv.MemoryStore(t))
	if err != nil {
		t.Fatal(err)
	}
	m := message(t)
	m.Consumer = "webhook"
	if err := s.deliver(context.Background(), m); err != nil {
		t.Fatalf("deliver: %v", err)
	}
	if len(processedA()) != 1 || len(processedB()) != 1 {
		t.Fatalf("A processed %v and B %v, want the event once each", processedA(), processedB())
	}

	atA := capture(t, &Sender{Secret: keyA}, message(t))
	status := post(t, urlB, atA, func(h http.Header) { h.Set(HeaderEventID, "ev-new-at-b") })
	if status != http.StatusUnauthorized || len(processedB()) != 1 {
		t.Errorf("B answered %d to a delivery signed for A (processed %v), want 401", status, processedB())
	}
}

// Newlines separate the signed fields, so an id or type holding one could
// shift into the next field: Sign refuses it, and the sender dead-letters
// the event without posting it.
func TestSignRefusesFieldsThatCouldShift(t *testing.T) {
	a, errA := Sign(secret, "a\nb", "c", "1800000000", nil)
	b, errB := Sign(secret, "a", "b\nc", "1800000000", nil)
	if errA == nil || errB == nil || a != "" || b != "" {
		t.Fatalf("Sign accepted fields with a newline: %q %v, %q %v", a, errA, b, errB)
	}
	for _, id := range []string{"ev\r1", " ev", "ev\t", "ev\x00"} {
		if _, err := Sign(secret, id, "t", "1800000000", nil); !errors.Is(err, ErrUnsignable) {
			t.Errorf("Sign(id %q) = %v, want ErrUnsignable", id, err)
		}
	}
	if _, err := Sign(secret, "ev", "t", "-5", nil); err == nil {
		t.Error("Sign accepted a negative timestamp")
	}

	posts := 0
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { posts++ }))
	defer srv.Close()
	m := message(t)
	m.Event.ID = "ev-1\nworkitem.deleted"
	err := (&Sender{Secret: secret}).Send(context.Background(), Endpoint{URL: srv.URL}, m)
	if outcome, _ := warren.Classify(err); outcome != warren.OutcomePermanent || posts != 0 {
		t.Errorf("an id with a newline: %v (%v) after %d posts, want permanent and none", outcome, err, posts)
	}
}

// Sign and warren.Event.Validate have one rule: an event the consumer
// accepts can be signed, and one Sign refuses is dead-lettered as
// undecodable before it reaches the sender. A blank around an id is
// refused by both: HTTP strips it from the header, so the receiver would
// verify, and deduplicate on, another id.
func TestSignAcceptsWhatValidateAccepts(t *testing.T) {
	for _, id := range []string{"ev-1", "ev 1", "é-1", " ev-1", "ev-1 ", "\u00a0ev-1", "ev\u00851", "ev\n1", "", "  "} {
		validErr := (&warren.Event{ID: id, Type: "workitem.updated"}).Validate()
		_, signErr := Sign(secret, id, "workitem.updated", "1800000000", nil)
		if (validErr == nil) != (signErr == nil) {
			t.Errorf("id %q: Validate says %v, Sign says %v", id, validErr, signErr)
		}
		if signErr != nil && (!errors.Is(signErr, ErrUnsignable) || !errors.Is(signErr, warren.ErrInvalidEvent)) {
			t.Errorf("id %q: Sign's error %v is not ErrUnsignable and ErrInvalidEvent", id, signErr)
		}
	}
	_, signErr := Sign(secret, "ev-1", " workitem.updated", "1800000000", nil)
	if validErr := (&warren.Event{ID: "ev-1", Type: " workitem.updated"}).Validate(); (validErr == nil) != (signErr == nil) {
		t.Errorf("type with a leading space: Validate says %v, Sign says %v", validErr, signErr)
	}
}

// Receivers migrate by accepting v1 behind AcceptV1 while senders are
// upgraded; v1's unsigned headers must then repeat the signed body.
func TestVerifyAcceptsV1OnlyWhenAsked(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	m := message(t)
	h := http.Header{}
	h.Set(HeaderEventID, m.Event.ID)
	h.Set(HeaderEventType, m.Event.Type)
	h.Set(HeaderTimestamp, "1800000000")
	h.Set(HeaderSignature, signV1(secret, "1800000000", m.Body))

	if err := Verify(secret, h, m.Body, 5*time.Minute, now); !errors.Is(err, ErrBadSignature) {
		t.Errorf("v1 without AcceptV1: %v, want ErrBadSignature", err)
	}
	if err := Verify(secret, h, m.Body, 5*time.Minute, now, AcceptV1()); err != nil {
		t.Errorf("v1 with AcceptV1: %v", err)
	}
	h.Set(HeaderEventID, "ev-forged")
	if err := Verify(secret, h, m.Body, 5*time.Minute, now, AcceptV1()); !errors.Is(err, ErrBadSignature) {
		t.Errorf("v1 with a changed id header: %v, want ErrBadSignature", err)
	}
}
