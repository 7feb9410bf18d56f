package redact

import (
	"net/url"
	"regexp"
	"strings"
)

const mask = "xxxxx"

// kvPassword finds the password of a key=value connection string, quoted
// or not.
var kvPassword = regexp.MustCompile(`(password\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s]*)`)

// urlPassword finds the password of a URL, even one that does not parse.
var urlPassword = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*://[^:/@]*:([^@]*)@`)

func isURL(s string) bool { return strings.Contains(s, "://") }

// URL returns a connection string with its password replaced by "xxxxx".
// A URL that does not parse is replaced whole, since it may still hold a
// secret.
func URL(conn string) string {
	if !isURL(conn) {
		return kvPassword.ReplaceAllString(conn, "${1}"+mask)
	}
	u, err := url.Parse(conn)
	if err != nil {
		return "<unparsable URL>"
	}
	if q := u.Query(); q.Has("password") {
		q.Set("password", mask)
		u.RawQuery = q.Encode()
	}
	return u.Redacted()
}

// Text returns s with every password of the connection strings conns
// replaced by "xxxxx", for text (an error message) that may quote them.
func Text(s string, conns ...string) string {
	for _, conn := range conns {
		for _, secret := range passwords(conn) {
			if len(secret) >= 3 { // shorter ones would blank out ordinary words
				s = strings.ReplaceAll(s, secret, mask)
			}
		}
	}
	return s
}

// Error returns err with the passwords of conns removed from its text. The
// result still matches err with errors.Is and errors.As.
func Error(err error, conns ...string) error {
	if err == nil {
		return nil
	}
	text := err.Error()
	if clean := Text(text, conns...); clean != text {
		return &redactedError{err: err, text: clean}
	}
	return err
}

type redactedError struct {
	err  error
	text string
}

func (e *redactedError) Error() string { return e.text }
func (e *redactedError) Unwrap() error { return e.err }

func passwords(conn string) []string {
	var out []string
	if isURL(conn) {
		if m := urlPassword.FindStringSubmatch(conn); m != nil {
			out = append(out, m[1])
		}
		if u, err := url.Parse(conn); err == nil {
			if pw, ok := u.User.Password(); ok {
				out = append(out, pw, url.UserPassword("", pw).String()[1:]) // raw and escaped
			}
			if pw := u.Query().Get("password"); pw != "" {
				out = append(out, pw)
			}
		}
		return out
	}
	for _, m := range kvPassword.FindAllStringSubmatch(conn, -1) {
		out = append(out, strings.Trim(m[2], "'"))
	}
	return out
}
