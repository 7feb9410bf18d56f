package webhook

import (
	"bytes"
	"net/url"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/warrenmq/warren/internal/redact"
)

// urlName names the endpoint at raw in error and log text: its scheme and
// host, and a short hash of the whole URL in place of the rest, e.g.
// "https://hooks.slack.com/…#3fa2c1". The rest is where an endpoint's
// credentials are: userinfo, query and, for Slack, Discord and Teams, the
// path itself (https://hooks.slack.com/services/T0/B0/<secret>). The hash
// tells endpoints on one host apart and is the start of the endpoint's id
// in dedup keys.
func urlName(raw string) string {
	hash := urlHash(raw)[:6]
	if u, err := url.Parse(raw); err == nil && u.Host != "" {
		return u.Scheme + "://" + u.Host + "/…#" + hash
	}
	return "(not a URL)#" + hash
}

// redactedURL is raw as errors may show a redirect's Location: without
// userinfo, fragment or query values (the names stay, for diagnosis). The
// sender cannot tell a token from an ordinary parameter, so every value
// goes; the path stays, masked by the caller where it may hold a secret.
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
			q[name] = []string{"xxxxx"}
		}
		u.RawQuery = q.Encode()
	}
	return u.String()
}

// urlSecrets lists the parts of the URL u that may be a credential, as
// text quoting the URL may show them: its userinfo, its path segments and
// its query values, each raw, decoded and query-escaped.
func urlSecrets(u *url.URL) []string {
	var out []string
	if u.User != nil {
		pw, _ := u.User.Password()
		out = append(out, u.User.Username(), pw)
	}
	for segment := range strings.SplitSeq(u.EscapedPath(), "/") {
		decoded, _ := url.PathUnescape(segment)
		out = append(out, segment, decoded)
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
	// Masked before it is cut: a cut secret would no longer match.
	s = redact.Values(s, secrets...)
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
