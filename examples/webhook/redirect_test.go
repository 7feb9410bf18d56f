package webhook

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/warrenmq/warren"
)

// redirecting starts an endpoint that answers every POST with status and a
// Location pointing at target, and a target that counts what reaches it.
func redirecting(t *testing.T, status int, targetQuery string) (endpoint string, targetHits *atomic.Int32) {
	t.Helper()
	targetHits = new(atomic.Int32)
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		targetHits.Add(1)
	}))
	t.Cleanup(target.Close)
	src := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL+"/internal"+targetQuery, status)
	}))
	t.Cleanup(src.Close)
	return src.URL, targetHits
}

// A 307 would re-send the signed body and its signature to wherever the
// endpoint points. The sender must not follow it, whatever client it was
// given: the second server sees nothing, and the event fails for good,
// saying why, without the Location's secrets.
func TestSendDoesNotFollowA307(t *testing.T) {
	url, hits := redirecting(t, http.StatusTemporaryRedirect, "?token=loc-secret-1")
	client := &http.Client{} // nil CheckRedirect: net/http would follow
	err := (&Sender{Client: client, Secret: secret}).Send(context.Background(), Endpoint{URL: url}, message(t))
	if n := hits.Load(); n != 0 {
		t.Fatalf("the redirect target received %d requests, want none", n)
	}
	if outcome, _ := warren.Classify(err); outcome != warren.OutcomePermanent {
		t.Fatalf("307: %v (%v), want a permanent failure", outcome, err)
	}
	for _, want := range []string{"307 redirect to", "/internal", "do not follow redirects"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "loc-secret-1") {
		t.Errorf("error %q carries the Location's token", err)
	}
}

// A 301 would turn the POST into a body-less GET whose 200 marked the event
// delivered though the receiver never got it.
func TestSendDoesNotCountA301AsDelivered(t *testing.T) {
	url, hits := redirecting(t, http.StatusMovedPermanently, "")
	err := (&Sender{Client: http.DefaultClient, Secret: secret}).Send(context.Background(), Endpoint{URL: url}, message(t))
	if err == nil {
		t.Fatal("a 301 was counted as delivered")
	}
	if outcome, _ := warren.Classify(err); outcome != warren.OutcomePermanent || hits.Load() != 0 {
		t.Fatalf("301: %v (%v) with %d requests at the target, want permanent and none", outcome, err, hits.Load())
	}
}

// The error of a failed POST goes to logs and dead-letter headers: it names
// the endpoint without its userinfo or query values, and keeps at most a
// short single line of the response body, with the endpoint's secrets out.
func TestSendErrorsCarryNoSecrets(t *testing.T) {
	const password, token = "pw-in-userinfo-1", "tok-in-query-1"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadRequest)
		// An error page that echoes the request back, over many lines.
		w.Write([]byte("bad request\r\nyou sent token=" + r.URL.Query().Get("token") + "\n" + strings.Repeat("<p>detail</p>\n", 100)))
	}))
	defer srv.Close()
	endpoint := strings.Replace(srv.URL, "http://", "http://bob:"+password+"@", 1) + "/hook?token=" + token + "&v=1"
	err := (&Sender{Client: srv.Client(), Secret: secret}).Send(context.Background(), Endpoint{URL: endpoint}, message(t))
	if err == nil {
		t.Fatal("a 400 was counted as delivered")
	}
	text := err.Error()
	for _, leaked := range []string{password, token} {
		if strings.Contains(text, leaked) {
			t.Errorf("error carries %q: %s", leaked, text)
		}
	}
	if strings.ContainsAny(text, "\r\n") {
		t.Errorf("error is not a single line: %q", text)
	}
	se := statusError(t, err)
	if len(se.Body) > maxErrorSnippet || !strings.HasPrefix(se.Body, "bad request you sent token=") {
		t.Errorf("body snippet %q: want ≤ %d bytes starting with the page's first words", se.Body, maxErrorSnippet)
	}
	if !strings.Contains(text, "400") || !strings.Contains(text, urlName(endpoint)) {
		t.Errorf("error %q does not say the status and the endpoint", text)
	}

	// A network error names the endpoint the same way.
	err = (&Sender{Client: http.DefaultClient, Secret: secret}).Send(context.Background(),
		Endpoint{URL: "http://bob:" + password + "@127.0.0.1:1/hook?token=" + token}, message(t))
	if err == nil || strings.Contains(err.Error(), password) || strings.Contains(err.Error(), token) {
		t.Errorf("network error %v carries a secret", err)
	}
}

func statusError(t *testing.T, err error) *StatusError {
	t.Helper()
	var se *StatusError
	if !errors.As(err, &se) {
		t.Fatalf("error %v is not a *StatusError", err)
	}
	return se
}

// Slack, Discord and Teams put the webhook's key in the URL's path
// (https://hooks.slack.com/services/T0/B0/<key>), so the path must not
// reach an error either: not as the endpoint's name, not in the body the
// endpoint echoes, not in a redirect's Location, on the endpoint's host or
// another.
func TestSendErrorsCarryNoSecretFromTheURLPath(t *testing.T) {
	const key = "Zq9xL2vT7kWm4nRb8cYd"
	const path = "/services/T0AB12/B0CD34/" + key
	other := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer other.Close()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Query().Get("answer") {
		case "same-host":
			http.Redirect(w, r, "/v2"+r.URL.Path+"/"+url.PathEscape("k3y-of-the-new-url"), http.StatusPermanentRedirect)
		case "other-host":
			http.Redirect(w, r, other.URL+r.URL.Path, http.StatusTemporaryRedirect)
		default:
			http.Error(w, "no_service: "+r.URL.Path+" ("+url.QueryEscape(r.URL.Path)+") is not a hook", http.StatusNotFound)
		}
	}))
	defer srv.Close()

	for _, answer := range []string{"body", "same-host", "other-host"} {
		t.Run(answer, func(t *testing.T) {
			ep := Endpoint{URL: srv.URL + path + "?answer=" + answer}
			err := (&Sender{Client: srv.Client(), Secret: secret}).Send(context.Background(), ep, message(t))
			if outcome, _ := warren.Classify(err); outcome != warren.OutcomePermanent {
				t.Fatalf("%v (%v), want a permanent failure", outcome, err)
			}
			text := err.Error()
			for _, leaked := range []string{key, "k3y-of-the-new-url"} {
				if strings.Contains(text, leaked) {
					t.Errorf("error carries %q: %s", leaked, text)
				}
			}
			if !strings.Contains(text, urlName(ep.URL)) || !strings.HasPrefix(urlName(ep.URL), srv.URL+"/…#") {
				t.Errorf("error %q does not name the endpoint as %q", text, urlName(ep.URL))
			}
			if answer == "other-host" && !strings.Contains(text, strings.TrimPrefix(other.URL, "http://")) {
				t.Errorf("error %q does not say where the endpoint redirects", text)
			}
		})
	}

	// A network error, and a configured Name.
	ep := Endpoint{URL: "http://127.0.0.1:1" + path, Name: "slack-alerts"}
	err := (&Sender{Client: http.DefaultClient, Secret: secret}).Send(context.Background(), ep, message(t))
	if err == nil || strings.Contains(err.Error(), key) || !strings.Contains(err.Error(), "POST slack-alerts: ") {
		t.Errorf("network error %v: want it named slack-alerts, without the key", err)
	}
}
