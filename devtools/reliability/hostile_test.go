package main

import (
	"errors"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/dlq"
	"github.com/warrenmq/warren/examples/webhook"
)

// TestHostileExpectationsMatchTheDecoder checks each hostile case's
// expected fate against warren.DecodeEvent, so that a run's verdict rests
// on expectations that hold for the code under test: a body expected to be
// undecodable must fail to decode with the expected text, and a body
// expected to be delivered must decode.
func TestHostileExpectationsMatchTheDecoder(t *testing.T) {
	// Rejected by the consumer before decoding, by property, size or
	// headers.
	beforeDecode := map[string]bool{"wrong-content-type": true, "gzip-encoding": true, "huge-body": true,
		"headers-nested-40": true, "headers-9000-entries": true}
	seen := map[string]bool{}
	for _, hc := range hostileCases() {
		if seen[hc.name] {
			t.Fatalf("case %s listed twice", hc.name)
		}
		seen[hc.name] = true
		id := hostileID("test", 1, hc.name, 0, hc.copies)
		msg := hc.build(id)
		if msg.MessageId != id {
			t.Errorf("%s: message_id %q, want %q (the DLQ check finds messages by it)", hc.name, msg.MessageId, id)
		}
		_, err := warren.DecodeEvent(msg.Body)
		switch {
		case hc.webhook.class == dlq.ClassUndecodable && !beforeDecode[hc.name]:
			if !errors.Is(err, warren.ErrInvalidEvent) {
				t.Errorf("%s: DecodeEvent error %v, want one wrapping ErrInvalidEvent", hc.name, err)
			} else if !strings.Contains(err.Error(), hc.webhook.errSubstr) {
				t.Errorf("%s: DecodeEvent error %q does not contain %q", hc.name, err, hc.webhook.errSubstr)
			}
		case err != nil:
			t.Errorf("%s: body must decode (the consumer rejects it for another reason, or handles it), got %v", hc.name, err)
		}
		if hc.name == "huge-body" && len(msg.Body) <= hostileBodyLimit {
			t.Errorf("huge-body is %d bytes, not over the %d-byte limit", len(msg.Body), hostileBodyLimit)
		}
		if hc.webhook != hc.automation && hc.webhook.class == dlq.ClassUndecodable {
			t.Errorf("%s: an undecodable message is undecodable for every consumer", hc.name)
		}
	}
}

func TestHostileIDsAreUniquePerCopy(t *testing.T) {
	ids := map[string]bool{}
	for _, hc := range hostileCases() {
		for n := range max(hc.copies, 1) {
			id := hostileID("run", 2, hc.name, n, hc.copies)
			if ids[id] {
				t.Fatalf("id %s repeats", id)
			}
			ids[id] = true
		}
	}
}

// The forged headers must be ones warren reads, or the forged-header cases
// would prove nothing: a consumer that trusted them would see 99 attempts
// and another consumer's origin.
func TestForgedHeadersAreReadAsWarrensOwn(t *testing.T) {
	m := dlq.ParseMetadata(forgedHeaders())
	if m.Attempts != 99 || m.Class != dlq.ClassExhausted || m.OriginQueue != forgedOrigin ||
		m.OriginExchange != forgedOrigin+".exchange" || m.Error != forgedError || m.FirstFailure.IsZero() {
		t.Fatalf("forged headers parse as %+v", m)
	}
}

// The hostile endpoints: WEBHOOK_URL's entries parse into the prefixes and
// URLs the cases rely on, the redirect leads a following client to the
// target (which counts it: the run's check can fail), and the refusing
// endpoint refuses.
func TestHostileEndpoints(t *testing.T) {
	e, err := startHostileEndpoints()
	if err != nil {
		t.Fatal(err)
	}
	defer e.close()
	eps, err := webhook.ParseEndpoints("http://127.0.0.1:1/hook," + e.webhookURLs())
	if err != nil {
		t.Fatal(err)
	}
	if len(eps) != 3 || len(eps[0].Prefixes) != 0 ||
		!slices.Equal(eps[1].Prefixes, []string{redirectPrefix}) || eps[1].URL != e.redirectURL ||
		!slices.Equal(eps[2].Prefixes, []string{secretPrefix}) || eps[2].URL != e.secretURL {
		t.Fatalf("WEBHOOK_URL parses as %+v", eps)
	}
	u, err := url.Parse(e.secretURL)
	if err != nil {
		t.Fatal(err)
	}
	if pw, _ := u.User.Password(); pw != endpointPassword || u.Query().Get("token") != endpointToken || !strings.HasSuffix(u.Path, "/"+endpointPathKey) {
		t.Fatalf("secret URL %s does not carry the password, token and path key", e.secretURL)
	}

	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noFollow.Post(e.redirectURL, "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTemporaryRedirect || e.targetHits.Load() != 0 {
		t.Fatalf("redirecting endpoint answered %d, target hits %d", resp.StatusCode, e.targetHits.Load())
	}
	resp, err = http.Post(e.redirectURL, "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || e.targetHits.Load() != 1 {
		t.Fatalf("a client following the redirect got %d, target hits %d, want 200 and 1", resp.StatusCode, e.targetHits.Load())
	}
	resp, err = http.Post(e.secretURL, "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), endpointPathKey) {
		t.Fatalf("refusing endpoint answered %d %q, want 400 quoting the path key", resp.StatusCode, body)
	}
}

// The sender's error for the refusing endpoint, which becomes the dead
// letter's header and the log line the run scans, holds none of the run's
// secrets: not the path key, though the URL and the body both carry it.
func TestRefusingEndpointErrorHoldsNoSecret(t *testing.T) {
	e, err := startHostileEndpoints()
	if err != nil {
		t.Fatal(err)
	}
	defer e.close()
	body := []byte(`{"event_id":"ev-1","event_type":"` + secretPrefix + `created"}`)
	ev, err := warren.DecodeEvent(body)
	if err != nil {
		t.Fatal(err)
	}
	s := &webhook.Sender{Secret: []byte(webhookSecret)}
	err = s.Send(t.Context(), webhook.Endpoint{URL: e.secretURL}, &warren.Message{Event: ev, Body: body})
	if err == nil || !strings.Contains(err.Error(), "400") {
		t.Fatalf("Send = %v, want the endpoint's 400", err)
	}
	if leaks := secretsIn(err.Error(), runSecrets()); len(leaks) != 0 {
		t.Fatalf("the error carries the %s", strings.Join(leaks, ", "))
	}
}

// A dead letter whose error carries the endpoint's URL unredacted shows
// the password and the token, wherever the header sits; one with the URL
// redacted shows nothing.
func TestSecretsInHeaders(t *testing.T) {
	leaky := "POST http://" + endpointUser + ":" + endpointPassword + "@127.0.0.1:1/refuse?tenant=acme&token=" + endpointToken + ": 400 Bad Request"
	h := dlq.Stamp(amqp.Table{"x-nested": []any{amqp.Table{"b": []byte(endpointToken)}}},
		dlq.Failure{Err: leaky, At: time.Now(), Queue: webhookQueue}, 1, dlq.ClassPermanent)
	got := secretsInHeaders(h, runSecrets())
	want := []string{"endpoint password in " + dlq.HeaderError, "endpoint token in x-nested[0].b", "endpoint token in " + dlq.HeaderError}
	if !slices.Equal(got, want) {
		t.Fatalf("found %q, want %q", got, want)
	}
	clean := dlq.Stamp(nil, dlq.Failure{Err: "POST http://127.0.0.1:1/refuse?tenant=acme&token=REDACTED: 400 Bad Request", At: time.Now()}, 1, dlq.ClassPermanent)
	if got := secretsInHeaders(clean, runSecrets()); len(got) != 0 {
		t.Fatalf("a redacted error shows %q", got)
	}
}

// scanLogs fails the run on a log line that carries a secret, naming the
// secret but not printing it.
func TestScanLogsFindsSecrets(t *testing.T) {
	dir := t.TempDir()
	logPath := filepath.Join(dir, "webhook-a.log")
	lines := `{"level":"INFO","msg":"started"}` + "\n" +
		`{"level":"WARN","msg":"handler failed","error":"POST http://hostile-user:` + endpointPassword + `@127.0.0.1:1/refuse: 400"}` + "\n"
	if err := os.WriteFile(logPath, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	h := &harness{procs: []*proc{newProc(procSpec{name: "webhook-a", kind: "relay"}, logPath)}, exitCodes: map[string]string{}}
	res := &result{stats: map[string]consumerStats{}}
	h.scanLogs(res)
	if res.secretLeaks != 1 || len(res.failures) != 1 || !strings.Contains(res.failures[0], "endpoint password") ||
		strings.Contains(res.failures[0], endpointPassword) {
		t.Fatalf("leaks %d, failures %q", res.secretLeaks, res.failures)
	}
}
