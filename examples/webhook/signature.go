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

	"github.com/warrenmq/warren"
)

// Headers on every delivery.
const (
	// HeaderEventID is the event's id: the key a receiver deduplicates on,
	// because a delivery can arrive more than once. It is signed, so a
	// receiver can trust it once [Verify] passed.
	HeaderEventID   = "X-Warren-Event-Id"
	HeaderEventType = "X-Warren-Event-Type"
	// HeaderTimestamp is the Unix time in seconds at which the delivery was
	// signed.
	HeaderTimestamp = "X-Warren-Timestamp"
	// HeaderSignature is the scheme's version, "=", and the hex signature:
	// "v2=<hex>" (see the package documentation for what v2 signs).
	HeaderSignature = "X-Warren-Signature"
)

// Signature schemes, the prefix of the HeaderSignature value.
const (
	// SchemeV2 signs the event id, the event type, the timestamp and the
	// body. The sender uses it.
	SchemeV2 = "v2="
	// SchemeV1 signed only "<timestamp>.<body>": a captured delivery
	// re-sent with another event id passed as a new event. [Verify]
	// accepts it only with [AcceptV1].
	SchemeV1 = "sha256="
)

// Sign returns the v2 signature header value for a delivery of the event
// eventID of type eventType, with body, sent at timestamp (Unix seconds):
// "v2=" and the hex HMAC-SHA256, keyed with the endpoint's secret, of
//
//	"v2\n" + eventID + "\n" + eventType + "\n" + timestamp + "\n" + body
//
// The fields are separated by newlines, so a field that held one could
// shift into the next: id "a\nb" with type "c" would sign the same string
// as id "a" with type "b\nc". Sign therefore refuses an id or a type that
// [warren.Event.Validate] refuses: empty, with a control character (none
// of which an HTTP header could carry intact anyway) or with leading or
// trailing white space (which HTTP strips from a header value, so the
// receiver would verify another id); and a timestamp that is not decimal
// digits. A valid event can always be signed.
func Sign(secret []byte, eventID, eventType, timestamp string, body []byte) (string, error) {
	if err := (&warren.Event{ID: eventID, Type: eventType}).Validate(); err != nil {
		return "", fmt.Errorf("webhook: event %w: %w", ErrUnsignable, err)
	}
	if _, err := strconv.ParseUint(timestamp, 10, 63); err != nil {
		return "", fmt.Errorf("webhook: timestamp %.32q is not Unix seconds", timestamp)
	}
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte("v2\n" + eventID + "\n" + eventType + "\n" + timestamp + "\n"))
	mac.Write(body)
	return SchemeV2 + hex.EncodeToString(mac.Sum(nil)), nil
}

// ErrUnsignable is an event id or type that Sign refuses. The error
// wraps warren.ErrInvalidEvent too.
var ErrUnsignable = errors.New("cannot be signed")

// signV1 is the retired scheme: the timestamp, a dot, and the body.
func signV1(secret []byte, timestamp string, body []byte) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(timestamp + "."))
	mac.Write(body)
	return SchemeV1 + hex.EncodeToString(mac.Sum(nil))
}

// Errors from [Verify].
var (
	ErrNoSignature  = errors.New("webhook: request is not signed")
	ErrBadSignature = errors.New("webhook: signature does not match")
	ErrStale        = errors.New("webhook: timestamp outside the accepted window")
)

// VerifyOption changes what [Verify] accepts.
type VerifyOption func(*verifyOptions)

type verifyOptions struct{ acceptV1 bool }

// AcceptV1 makes Verify accept the retired v1 scheme too, while senders
// are upgraded. v1 did not sign the id and type headers, so Verify then
// checks them against the event in the signed body and refuses a delivery
// whose headers differ from it. Remove the option once every sender signs
// v2.
func AcceptV1() VerifyOption { return func(o *verifyOptions) { o.acceptV1 = true } }

// Verify checks a delivery on the receiving side: the signature must be v2
// (or v1 with [AcceptV1]) and match, keyed with this endpoint's secret, the
// event id and type headers, the timestamp and the body; and the timestamp
// must be within tolerance of now (five minutes is usual), which bounds
// how long a captured delivery can be replayed. After it returns nil the
// HeaderEventID and HeaderEventType values are authentic: deduplicate on
// that id, within at least the tolerance, and a replay is harmless. Use it
// in your receiver before trusting anything in the request:
//
//	body, _ := io.ReadAll(r.Body)
//	if err := webhook.Verify(secret, r.Header, body, 5*time.Minute, time.Now()); err != nil {
//		http.Error(w, err.Error(), http.StatusUnauthorized)
//		return
//	}
func Verify(secret []byte, h http.Header, body []byte, tolerance time.Duration, now time.Time, opts ...VerifyOption) error {
	var o verifyOptions
	for _, opt := range opts {
		opt(&o)
	}
	for _, name := range []string{HeaderEventID, HeaderEventType, HeaderTimestamp, HeaderSignature} {
		if len(h.Values(name)) > 1 {
			// Which copy would the application read? Refuse to guess.
			return fmt.Errorf("%w: %s given more than once", ErrBadSignature, name)
		}
	}
	ts, sig := h.Get(HeaderTimestamp), h.Get(HeaderSignature)
	if ts == "" || sig == "" {
		return ErrNoSignature
	}
	secs, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: timestamp %.32q is not Unix seconds", ErrStale, ts)
	}
	if age := now.Sub(time.Unix(secs, 0)); age > tolerance || age < -tolerance {
		return fmt.Errorf("%w: signed %v ago", ErrStale, age.Round(time.Second))
	}
	id, typ := h.Get(HeaderEventID), h.Get(HeaderEventType)
	var want string
	switch {
	case strings.HasPrefix(sig, SchemeV2):
		if want, err = Sign(secret, id, typ, ts, body); err != nil {
			return fmt.Errorf("%w: %v", ErrBadSignature, err)
		}
	case strings.HasPrefix(sig, SchemeV1) && o.acceptV1:
		want = signV1(secret, ts, body)
	default:
		return fmt.Errorf("%w: unknown or refused scheme", ErrBadSignature)
	}
	// hmac.Equal compares in constant time, so the comparison does not leak
	// how much of a forged signature was right.
	if !hmac.Equal([]byte(sig), []byte(want)) {
		return ErrBadSignature
	}
	if strings.HasPrefix(sig, SchemeV1) {
		// v1 signed only the body: the headers are authentic only if they
		// repeat the event in it.
		if ev, err := warren.DecodeEvent(body); err != nil || ev.ID != id || ev.Type != typ {
			return fmt.Errorf("%w: v1 delivery whose id or type headers differ from its body", ErrBadSignature)
		}
	}
	return nil
}
