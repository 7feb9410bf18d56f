package webhook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/warrenmq/warren"
)

// StatusError is a delivery the endpoint answered with a non-2xx status.
type StatusError struct {
	URL        string
	StatusCode int
	Body       string // the start of the response body
}

func (e *StatusError) Error() string {
	if e.Body == "" {
		return fmt.Sprintf("POST %s: %d %s", e.URL, e.StatusCode, http.StatusText(e.StatusCode))
	}
	return fmt.Sprintf("POST %s: %d %s: %s", e.URL, e.StatusCode, http.StatusText(e.StatusCode), e.Body)
}

// maxErrorBody is how much of a failed response's body the error (and so
// the dead letter) keeps.
const maxErrorBody = 512

// Sender POSTs events to endpoints.
type Sender struct {
	Client *http.Client
	Secret []byte
	// Now is the clock used for timestamps; nil means time.Now.
	Now func() time.Time
}

// Send delivers the event in m to url and says what the outcome means:
//
//	2xx                                   nil
//	timeout, network error, 408, 5xx      transient: retried through the tiers
//	429                                   transient, after Retry-After if given
//	any other status                      warren.Permanent: dead-lettered now
//
// The body is the event exactly as it arrived, so fields warren does not
// know reach the receiver too.
func (s *Sender) Send(ctx context.Context, url string, m *warren.Message) error {
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}
	ts := strconv.FormatInt(now().Unix(), 10)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(m.Body))
	if err != nil {
		return warren.Permanent(fmt.Errorf("webhook URL %q: %w", url, err))
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "warren-webhook/1")
	req.Header.Set(HeaderEventID, m.Event.ID)
	req.Header.Set(HeaderEventType, m.Event.Type)
	req.Header.Set(HeaderTimestamp, ts)
	req.Header.Set(HeaderSignature, Sign(s.Secret, ts, m.Body))

	resp, err := s.Client.Do(req)
	if err != nil {
		// Network errors and timeouts: the endpoint may be back soon.
		return fmt.Errorf("POST %s: %w", url, err)
	}
	defer resp.Body.Close()
	head, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20)) // let the connection be reused

	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return nil
	}
	serr := &StatusError{URL: url, StatusCode: resp.StatusCode, Body: printable(head)}
	switch {
	case resp.StatusCode == http.StatusTooManyRequests:
		return warren.RetryAfter(retryAfter(resp.Header.Get("Retry-After"), now()), serr)
	case resp.StatusCode == http.StatusRequestTimeout || resp.StatusCode >= 500:
		return serr
	default:
		return warren.Permanent(serr)
	}
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

// printable keeps a response body readable in logs and headers.
func printable(b []byte) string {
	s := strings.TrimSpace(string(bytes.ToValidUTF8(b, []byte("?"))))
	if len(b) == maxErrorBody {
		s += "…"
	}
	return strings.Map(func(r rune) rune {
		if r == utf8.RuneError || r < 0x20 && r != '\n' && r != '\t' {
			return '?'
		}
		return r
	}, s)
}

// IsPermanent reports whether err from Send means the endpoint refused the
// event for good.
func IsPermanent(err error) bool { return errors.Is(err, warren.ErrPermanent) }
