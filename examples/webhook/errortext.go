package webhook

import (
	"bytes"
	"net/url"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/warrenmq/warren/internal/redact"
)

// mask replaces a secret in error text.
const mask = "xxxxx"

// redactedURL is raw as errors may show it: without userinfo, fragment or
// query values (the names stay, for diagnosis). An endpoint's URL is the
// usual place for its credentials, and the sender cannot tell a token
// from an ordinary parameter, so every value goes.
func redactedURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		// url.Parse cannot say where the secrets are; redact.URL hides
		// what an unparsable URL may hold.
		return redact.URL(raw)
	}
	u.User, u.Fragment, u.RawFragment = nil, "", ""
	if u.RawQuery != "" {
		q := u.Query()
		for name := range q {
			q[name] = []string{mask}
		}
		u.RawQuery = q.Encode()
	}
	return u.String()
}

// endpointSecrets lists what an endpoint's answer must not carry into an
// error: the userinfo and query values of its URL, raw and escaped, and
// the signing secret.
func endpointSecrets(raw string, signingSecret []byte) []string {
	out := []string{string(signingSecret)}
	u, err := url.Parse(raw)
	if err != nil {
		return out
	}
	if u.User != nil {
		pw, _ := u.User.Password()
		out = append(out, u.User.Username(), pw)
	}
	for _, values := range u.Query() {
		out = append(out, values...)
	}
	for _, s := range out {
		out = append(out, url.QueryEscape(s))
	}
	return out
}

// snippet is the start of a response body as an error may show it: valid
// UTF-8 on one line, whitespace runs and control characters folded to one
// space, secrets masked, at most maxErrorSnippet bytes.
func snippet(body []byte, secrets []string) string {
	s := string(bytes.ToValidUTF8(body, []byte("?")))
	s = strings.Join(strings.FieldsFunc(s, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }), " ")
	for _, secret := range secrets {
		if len(secret) >= 3 { // shorter ones would mask ordinary words
			s = strings.ReplaceAll(s, secret, mask)
		}
	}
	if len(s) <= maxErrorSnippet {
		return s
	}
	const more = "…"
	cut := maxErrorSnippet - len(more)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + more
}
