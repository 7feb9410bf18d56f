package redact

import (
	"net/url"
	"strings"
)

const mask = "xxxxx"

// URL returns a connection string (a URL, or Postgres's key=value form)
// with its password replaced by "xxxxx", for printing. It works on the
// text, so a URL that does not parse is redacted too (a password with an
// unescaped '%' or '#' is the usual reason it does not).
func URL(conn string) string { return Secrets(conn) }

// Text returns s with every password of the connection strings conns
// replaced by "xxxxx", and then put through [Secrets]: for text (an error
// message) that may quote the passwords themselves, not only the URLs.
func Text(s string, conns ...string) string {
	var secrets []string
	for _, conn := range conns {
		secrets = append(secrets, passwords(conn)...)
	}
	return Secrets(Values(s, secrets...))
}

// Error returns err with its text put through [Text] (the passwords of
// conns, and whatever [Secrets] finds). The result still matches err with
// errors.Is and errors.As; err itself comes back when nothing was masked.
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

// passwords lists the forms in which conn's password may appear in an
// error's text: as written and, for a URL that parses, decoded and
// re-escaped.
func passwords(conn string) []string {
	if !strings.Contains(conn, "://") {
		var out []string
		for _, m := range param.FindAllStringSubmatch(conn, -1) {
			if secretName(m[1]) {
				out = append(out, strings.Trim(m[2], `'"`))
			}
		}
		return out
	}
	var out []string
	if pw, ok := userinfoPassword(conn); ok {
		out = append(out, pw)
	}
	if u, err := url.Parse(conn); err == nil {
		if pw, ok := u.User.Password(); ok {
			out = append(out, pw, url.UserPassword("", pw).String()[1:]) // raw and escaped
		}
		for name, values := range u.Query() {
			if secretName(name) {
				out = append(out, values...)
			}
		}
	}
	return out
}
