package webhook

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/internal/redact"
)

// StatusError is a delivery the endpoint answered with a non-2xx status.
// Its text goes to logs and dead-letter headers, so it holds nothing the
// endpoint's URL or answer could hide a secret in: the endpoint is named,
// not quoted; the Location and the body are redacted.
type StatusError struct {
	// URL names the endpoint: its Endpoint.Name, or its scheme and host
	// and a hash of the rest ("https://hooks.slack.com/…#3fa2c1"), never
	// its path, query or userinfo.
	URL        string
	StatusCode int
	// Location is where a 3xx answer pointed, without userinfo or query
	// values, and with every path segment of the endpoint's URL masked
	// (every path segment of the Location too, when it is on the
	// endpoint's host: a redirect to the same service keeps its secret).
	Location string
	// Body is the start of the response body, at most maxErrorSnippet
	// bytes on one line, with the secrets of the endpoint's URL (and of
	// the Location, as above) and the signing secret masked.
	Body string
}

func (e *StatusError) Error() string {
	if isRedirect(e.StatusCode) {
		to := cmp.Or(e.Location, "nowhere (no Location)")
		return fmt.Sprintf("POST %s: endpoint answered %d redirect to %s; webhooks do not follow redirects", e.URL, e.StatusCode, to)
	}
	if e.Body == "" {
		return fmt.Sprintf("POST %s: %d %s", e.URL, e.StatusCode, http.StatusText(e.StatusCode))
	}
	return fmt.Sprintf("POST %s: %d %s: %s", e.URL, e.StatusCode, http.StatusText(e.StatusCode), e.Body)
}

func isRedirect(status int) bool { return status >= 300 && status < 400 }

// maxErrorSnippet is how much of a failed response's body, in bytes, the
// error (and so the dead letter) keeps: enough for the endpoint's reason,
// too little to carry a page of whatever it echoes back.
const maxErrorSnippet = 200

// Sender POSTs events to endpoints.
type Sender struct {
	// Client sends the requests; nil means a client with no timeout. The
	// sender never follows redirects, whatever Client.CheckRedirect says
	// (see Send).
	Client *http.Client
	// Secret signs deliveries to endpoints without their own
	// Endpoint.Secret.
	Secret []byte
	// Now is the clock used for timestamps; nil means time.Now.
	Now func() time.Time
}

// Send delivers the event in m to ep, signed with ep.Secret (s.Secret when
// it has none), and says what the outcome means:
//
//	2xx                                   nil
//	timeout, network error, 408, 5xx      transient: retried through the tiers
//	429                                   transient, after Retry-After if given
//	3xx                                   warren.Permanent: redirects are not followed
//	any other status                      warren.Permanent: dead-lettered now
//	an id or type Sign refuses            warren.Permanent
//
// The body is the event exactly as it arrived, so fields warren does not
// know reach the receiver too.
//
// Redirects are not followed: a 307 would re-send the signed body to
// wherever the endpoint points (an internal address included), and a 301
// would turn the POST into a body-less GET whose 200 looks like success.
// A 3xx is permanent because it says the configured URL is not where the
// receiver is: retrying the same URL gets the same answer, and the fix is
// the operator's (configure the final URL, then replay the dead letters).
func (s *Sender) Send(ctx context.Context, ep Endpoint, m *warren.Message) error {
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}
	shown := ep.name()
	secret := ep.Secret
	if len(secret) == 0 {
		secret = s.Secret
	}
	if len(secret) == 0 {
		return warren.Permanent(fmt.Errorf("webhook %s: no signing secret (neither the endpoint's nor the sender's)", shown))
	}
	ts := strconv.FormatInt(now().Unix(), 10)
	signature, err := Sign(secret, m.Event.ID, m.Event.Type, ts, m.Body)
	if err != nil {
		// The event itself is at fault: no retry can sign it.
		return warren.Permanent(err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ep.URL, bytes.NewReader(m.Body))
	if err != nil {
		return warren.Permanent(fmt.Errorf("webhook URL %s: %w", shown, withoutURL(err)))
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "warren-webhook/1")
	req.Header.Set(HeaderEventID, m.Event.ID)
	req.Header.Set(HeaderEventType, m.Event.Type)
	req.Header.Set(HeaderTimestamp, ts)
	req.Header.Set(HeaderSignature, signature)

	resp, err := s.client().Do(req)
	if err != nil {
		// Network errors and timeouts: the endpoint may be back soon.
		return fmt.Errorf("POST %s: %w", shown, withoutURL(err))
	}
	defer resp.Body.Close()
	head, _ := io.ReadAll(io.LimitReader(resp.Body, 4*maxErrorSnippet))
	io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20)) // let the connection be reused

	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return nil
	}
	secrets := append(urlSecrets(req.URL), string(secret))
	serr := &StatusError{URL: shown, StatusCode: resp.StatusCode}
	if loc, err := resp.Location(); err == nil {
		if strings.EqualFold(loc.Host, req.URL.Host) {
			secrets = append(secrets, urlSecrets(loc)...)
		}
		serr.Location = redact.Values(redactedURL(loc.String()), secrets...)
	}
	serr.Body = snippet(head, secrets)
	switch {
	case resp.StatusCode == http.StatusTooManyRequests:
		return warren.RetryAfter(retryAfter(resp.Header.Get("Retry-After"), now()), serr)
	case resp.StatusCode == http.StatusRequestTimeout || resp.StatusCode >= 500:
		return serr
	default: // 3xx and 4xx
		return warren.Permanent(serr)
	}
}

// client is s.Client with redirects refused. It is a copy so that the
// caller's client keeps its own policy, and so that no caller-supplied
// CheckRedirect can make the sender follow one.
func (s *Sender) client() *http.Client {
	c := &http.Client{}
	if s.Client != nil {
		*c = *s.Client
	}
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return c
}

// withoutURL drops the *url.Error around err: its text quotes the request
// URL with its query (a token, often) and sometimes its userinfo.
func withoutURL(err error) error {
	if uerr, ok := errors.AsType[*url.Error](err); ok {
		return uerr.Err
	}
	return err
}

// retryAfter reads a Retry-After header: seconds or an HTTP date.
func retryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if secs, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && secs > 0 {
		return time.Duration(secs) * time.Second
	}
	if at, err := http.ParseTime(v); err == nil && at.After(now) {
		return at.Sub(now)
	}
	return 0
}

// IsPermanent reports whether err from Send means the endpoint refused the
// event for good.
func IsPermanent(err error) bool { return errors.Is(err, warren.ErrPermanent) }
