package redact_test

import (
	"errors"
	"io/fs"
	"strings"
	"testing"

	"github.com/warrenmq/warren/internal/redact"
)

func TestURL(t *testing.T) {
	for in, want := range map[string]string{
		"amqp://guest:secret@host:5672/vh":              "amqp://guest:xxxxx@host:5672/vh",
		"amqp://host/":                                  "amqp://host/",
		"redis://:secret@127.0.0.1:6379/0":              "redis://:xxxxx@127.0.0.1:6379/0",
		"postgres://u:secret@db:5432/x?sslmode=disable": "postgres://u:xxxxx@db:5432/x?sslmode=disable",
		"postgresql://u@db/x":                           "postgresql://u@db/x",
		"postgres://u@db/x?password=secret":             "postgres://u@db/x?password=xxxxx",
		"host=db user=u password=secret dbname=x":       "host=db user=u password=xxxxx dbname=x",
		"host=db password='se cret' dbname=x":           "host=db password=xxxxx dbname=x",
		"postgres://u:secret@db:bad/x":                  "postgres://u:xxxxx@db:bad/x",
		"amqp://guest:50%off@host/":                     "amqp://guest:xxxxx@host/",
		"amqp://guest:Hunter2#x@host/":                  "amqp://guest:xxxxx@host/",
		"::not a url::secret":                           "::not a url::secret",
	} {
		if got := redact.URL(in); got != want {
			t.Errorf("URL(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestErrorHidesEveryFormOfThePassword(t *testing.T) {
	for conn, secret := range map[string]string{
		"postgres://u:hunter22@db/x":     "hunter22",
		"postgres://u:p%40ss99@db/x":     "p%40ss99",
		"amqp://u:p@ss99x@broker/":       "p@ss99x",
		"host=db password=hunter22":      "hunter22",
		"postgres://u:hunter22@db:bad/x": "hunter22",
	} {
		cause := fs.ErrNotExist
		err := redact.Error(errors.Join(errors.New("cannot use "+conn+" or "+secret), cause), conn)
		if strings.Contains(err.Error(), secret) {
			t.Errorf("Error left the password in %q", err)
		}
		if !errors.Is(err, cause) {
			t.Errorf("redacted error lost its cause")
		}
	}
	plain := errors.New("connection refused")
	if redact.Error(plain, "amqp://u:secret@h/") != plain {
		t.Error("an error without the password should come back unchanged")
	}
	if redact.Error(nil, "x") != nil {
		t.Error("nil must stay nil")
	}
}

func TestSecrets(t *testing.T) {
	for in, want := range map[string]string{
		// Passwords in URLs, whether they parse or not.
		"POST https://bob:s3cr3t-pw@hooks.example/x?token=tok-123&v=1: 500 Internal Server Error": "POST https://bob:xxxxx@hooks.example/x?token=xxxxx&v=1: 500 Internal Server Error",
		`parse "amqp://guest:50%off@host/": invalid URL escape "%of"`:                             `parse "amqp://guest:xxxxx@host/": invalid URL escape "xxxxx"`,
		`parse "amqp://guest:Hunter2": invalid port ":Hunter2" after host`:                        `parse "amqp://guest:xxxxx": invalid port "xxxxx" after host`,
		"dial amqp://u:p@ss/w#rd@broker:5672/vh failed":                                           "dial amqp://u:xxxxx@broker:5672/vh failed",
		"redis://:pw123@127.0.0.1:6379/0 and amqp://a:b2c3@h/":                                    "redis://:xxxxx@127.0.0.1:6379/0 and amqp://a:xxxxx@h/",
		// Secret-looking parameters, query, key=value and JSON.
		"GET /cb?code=1&access_token=abc&X-Amz-Signature=f00d&sig=9&page=2":   "GET /cb?code=1&access_token=xxxxx&X-Amz-Signature=xxxxx&sig=xxxxx&page=2",
		"host=db user=u password='se cret' dbname=x sslmode=disable":          "host=db user=u password=xxxxx dbname=x sslmode=disable",
		"api-key=k1; Session_ID=s2, clientSecret=c3 author=ann":               "api-key=xxxxx; Session_ID=xxxxx, clientSecret=xxxxx author=ann",
		`500: {"error":"denied","refresh_token":"r-1","Password": "p 2"}`:     `500: {"error":"denied","refresh_token":"xxxxx","Password": "xxxxx"}`,
		"Authorization: Basic dXNlcjpwdw== was refused":                       "Authorization: Basic xxxxx was refused",
		"GET https://h/x?v=2&sig=a:b: 404 Not Found":                          "GET https://h/x?v=2&sig=xxxxx: 404 Not Found",
		"sent authorization=Bearer%20abc and Bearer eyJhbGciOi.x.y, retrying": "sent authorization=xxxxx and Bearer xxxxx, retrying",
		// Names percent-encoded (once or twice), and jwt, hmac, pw.
		"GET /cb?access%5Ftoken=at-1&api%5fkey=k-2&p%2561ssword=p-3&v=1": "GET /cb?access%5Ftoken=xxxxx&api%5fkey=xxxxx&p%2561ssword=xxxxx&v=1",
		"jwt=eyJ.x.y hmac=9f86d0 pw=hunter2 X-Hub-Hmac-Sha256=ab12":      "jwt=xxxxx hmac=xxxxx pw=xxxxx X-Hub-Hmac-Sha256=xxxxx",
		// Nothing secret: unchanged.
		"upstream said code=500; exit code=1; 100%25 done, a%zz=1, pwm=on":                    "upstream said code=500; exit code=1; 100%25 done, a%zz=1, pwm=on",
		`Post "https://hooks.example:8443/x?v=1": dial tcp 10.0.0.1:8443: connection refused`: `Post "https://hooks.example:8443/x?v=1": dial tcp 10.0.0.1:8443: connection refused`,
		"http://[::1]:8080/a?b=c, mailto:ann@example.com, amqp://guest@host/, x=1":            "http://[::1]:8080/a?b=c, mailto:ann@example.com, amqp://guest@host/, x=1",
		"invalid port \":99\" after host; the bearer token expired; key: value":               "invalid port \":99\" after host; the bearer token expired; key: value",
		"handler panicked: runtime error: index out of range [3] with length 2":               "handler panicked: runtime error: index out of range [3] with length 2",
	} {
		if got := redact.Secrets(in); got != want {
			t.Errorf("Secrets(%q)\n  = %q\nwant %q", in, got, want)
		}
		if got := redact.Secrets(want); got != want {
			t.Errorf("Secrets is not idempotent on %q: %q", want, got)
		}
	}
}

func TestErrorMasksSecretsWithoutKnowingTheConnection(t *testing.T) {
	cause := errors.New("POST https://bob:s3cr3t-pw@hooks.example/x?token=tok-123: 500")
	err := redact.Error(errors.Join(cause, fs.ErrClosed))
	if strings.Contains(err.Error(), "s3cr3t-pw") || strings.Contains(err.Error(), "tok-123") {
		t.Errorf("Error left a secret in %q", err)
	}
	if !errors.Is(err, cause) || !errors.Is(err, fs.ErrClosed) {
		t.Error("redacted error lost its causes")
	}
}

// The shapes a message body or header value takes that the console's
// message page masks with Secrets: a secret-named JSON field whose value
// is a number, an array or an object, YAML's "name: value", and the rest.
func TestSecretsMasksEveryValueShapeOfASecretName(t *testing.T) {
	for _, s := range []string{
		"{\n  \"password\": \"hunter2\"\n}",
		"{\n  \"api_key\": \"hunter2\"\n}",
		"{\n  \"token\": 12345678\n}",
		"{\"token\":12345678,\"n\":1}",
		"{\n  \"password\": [\n    \"hunter2\"\n  ]\n}",
		"{\"password\":[\"a\",[\"hunter2\"]],\"n\":1}",
		"{\n  \"credentials\": {\n    \"user\": \"u\",\n    \"pass\": \"hunter2\"\n  }\n}",
		"{\"secret\": {\"a\": {\"b\": \"hunter2\"}}}",
		"{\n  \"Authorization\": \"Basic aHVudGVyMg==\"\n}",
		"{\n  \"X-Api-Key\": \"hunter2\"\n}",
		"{\n  \"privateKey\": \"-----BEGIN PRIVATE KEY-----\\nhunter2\"\n}",
		"{\n  \"dsn\": \"host=db user=u password=hunter2\"\n}",
		"{\n  \"url\": \"postgres://u:hunter2@db/x\"\n}",
		"password%3Dhunter2",
		"PASSWORD=hunter2",
		"password : hunter2",
		"<password>hunter2</password>",
		"password: hunter2",
		"db:\n  password: hunter2\n",
		"token: 12345678",
	} {
		if got := redact.Secrets(s); strings.Contains(got, "hunter2") || strings.Contains(got, "12345678") || strings.Contains(got, "aHVudGVyMg") {
			t.Errorf("%q -> %q", s, got)
		}
	}
	// What is not a secret's value stays readable.
	for _, s := range []string{`{"count": 3}`, "code: 500", "error: timeout after 5s", `{"n": [1, 2]}`} {
		if got := redact.Secrets(s); got != s {
			t.Errorf("%q -> %q, want it unchanged", s, got)
		}
	}
}
