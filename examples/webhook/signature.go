package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Headers on every delivery.
const (
	// HeaderEventID is the event's id: the key a receiver deduplicates on,
	// because a delivery can arrive more than once.
	HeaderEventID   = "X-Warren-Event-Id"
	HeaderEventType = "X-Warren-Event-Type"
	// HeaderTimestamp is the Unix time in seconds at which the delivery was
	// signed.
	HeaderTimestamp = "X-Warren-Timestamp"
	// HeaderSignature is "sha256=" and the hex HMAC-SHA256, keyed with the
	// shared secret, of the timestamp, a dot, and the body.
	HeaderSignature = "X-Warren-Signature"
)

// Sign returns the signature header value for a body sent at timestamp.
// Signing the timestamp with the body lets a receiver refuse an old
// delivery replayed by someone who captured it.
func Sign(secret []byte, timestamp string, body []byte) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(timestamp))
	mac.Write([]byte{'.'})
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// Errors from [Verify].
var (
	ErrNoSignature  = errors.New("webhook: request is not signed")
	ErrBadSignature = errors.New("webhook: signature does not match")
	ErrStale        = errors.New("webhook: timestamp outside the accepted window")
)

// Verify checks a delivery on the receiving side: the signature must match
// the body and the timestamp, and the timestamp must be within tolerance of
// now (five minutes is usual). Use it in your receiver before trusting the
// body:
//
//	body, _ := io.ReadAll(r.Body)
//	if err := webhook.Verify(secret, r.Header, body, 5*time.Minute, time.Now()); err != nil {
//		http.Error(w, err.Error(), http.StatusUnauthorized)
//		return
//	}
func Verify(secret []byte, h http.Header, body []byte, tolerance time.Duration, now time.Time) error {
	ts, sig := h.Get(HeaderTimestamp), h.Get(HeaderSignature)
	if ts == "" || sig == "" {
		return ErrNoSignature
	}
	secs, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: timestamp %q is not Unix seconds", ErrStale, ts)
	}
	if age := now.Sub(time.Unix(secs, 0)); age > tolerance || age < -tolerance {
		return fmt.Errorf("%w: signed %v ago", ErrStale, age.Round(time.Second))
	}
	if !strings.HasPrefix(sig, "sha256=") {
		return fmt.Errorf("%w: unknown scheme", ErrBadSignature)
	}
	// hmac.Equal compares in constant time, so the comparison does not leak
	// how much of a forged signature was right.
	if !hmac.Equal([]byte(sig), []byte(Sign(secret, ts, body))) {
		return ErrBadSignature
	}
	return nil
}
