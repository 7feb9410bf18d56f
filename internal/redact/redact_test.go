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
		"postgres://u:secret@db:bad/x":                  "<unparsable URL>",
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
