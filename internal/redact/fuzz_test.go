package redact

import (
	"net/url"
	"strconv"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
)

// FuzzRedactURL builds scheme://user:PASSWORD@host… from the fuzzer's
// strings, with passwords that need not parse (unescaped '%', '#', '/',
// '@'). Two properties:
//
//   - PASSWORD appears neither in what Secrets makes of the URL (bare, in a
//     sentence, quoted as errors quote it) nor in what it makes of the
//     errors net/url and the AMQP client return for that URL;
//   - the same URL without userinfo, with a numeric port and parameters
//     whose names are not secret, comes back unchanged.
func FuzzRedactURL(f *testing.F) {
	f.Add("amqp", "guest", "50%off", "host", 5672, "/vh", "v", "1")
	f.Add("amqp", "guest", "Hunter2#x", "host", 0, "/", "", "")
	f.Add("https", "bob", "s3cr3t-pw", "hooks.example", 443, "/x", "token", "tok-123")
	f.Add("redis", "", "p@ss/w0rd", "127.0.0.1", 6379, "/0", "db", "0")
	f.Add("postgres", "u", `q"uo\te`, "db", 0, "/x", "sslmode", "disable")
	f.Add("https", "bob", "pw-4567", "api.example", 0, "/cb", "access%5Ftoken", "at-1")
	f.Add("https", "", "jwt-pw-1", "api.example", 0, "/", "jwt", "eyJ.x.y")
	f.Add("https", "u", "hmac-pw-1", "api.example", 0, "/hook", "hmac", "9f86d0")
	f.Add("ftp", "u", "pw-pw-pw", "files.example", 21, "/", "pw", "hunter2")
	f.Add("https", "u", "code-pw-1", "api.example", 0, "/cb", "code", "500")
	f.Fuzz(func(t *testing.T, scheme, user, password, host string, port int, path, name, value string) {
		scheme = keep(scheme, func(r rune) bool { return 'a' <= r && r <= 'z' })
		user = keep(user, func(r rune) bool { return r > ' ' && r < 0x7f && !strings.ContainsRune(":/?#@[", r) })
		password = keep(password, func(r rune) bool { return r > ' ' && r < 0x7f })
		host = keep(host, func(r rune) bool { return 'a' <= r && r <= 'z' || '0' <= r && r <= '9' || r == '.' || r == '-' })
		path = "/" + keep(path, func(r rune) bool { return r > ' ' && r < 0x7f && !strings.ContainsRune("@?#", r) })
		if scheme == "" || host == "" || len(password) < 4 {
			return
		}
		hostPort := host
		if port > 0 && port < 65536 {
			hostPort += ":" + strconv.Itoa(port)
		}
		query := url.Values{name: {value}}.Encode()
		clean := scheme + "://" + hostPort + path + "?" + query
		withPassword := scheme + "://" + user + ":" + password + "@" + hostPort + path + "?" + query
		if strings.Contains(scheme+user+hostPort+path+query, password) {
			return // the password must be told apart from the rest
		}

		texts := []string{
			withPassword,
			"dial " + withPassword + ": connection refused",
			strconv.Quote(withPassword),
		}
		if _, err := url.Parse(withPassword); err != nil {
			texts = append(texts, err.Error())
		}
		if _, err := amqp.ParseURI(withPassword); err != nil {
			texts = append(texts, err.Error())
		}
		quoted := strconv.Quote(password)
		quoted = quoted[1 : len(quoted)-1] // as %q and url.Error print it
		for _, text := range texts {
			got := Secrets(text)
			if strings.Contains(got, password) || strings.Contains(got, quoted) {
				t.Fatalf("password %q left in Secrets(%q) = %q", password, text, got)
			}
			if again := Secrets(got); again != got {
				t.Fatalf("Secrets not idempotent: %q then %q", got, again)
			}
		}

		if secretName(name) || strings.Contains(path, "=") || strings.Contains(strings.ToLower(path), "authorization") {
			return
		}
		for _, text := range []string{clean, "Post " + strconv.Quote(clean) + ": 503 Service Unavailable"} {
			if got := Secrets(text); got != text {
				t.Fatalf("Secrets changed text without secrets: %q became %q", text, got)
			}
		}
	})
}

// keep returns the runes of s that ok accepts.
func keep(s string, ok func(rune) bool) string {
	return strings.Map(func(r rune) rune {
		if ok(r) {
			return r
		}
		return -1
	}, s)
}
