package redact_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/warrenmq/warren/internal/redact"
)

// secretValue is a LogValuer that resolves to a secret.
type secretValue struct{}

func (secretValue) LogValue() slog.Value { return slog.StringValue("password=lv-secret") }

// endpoint is neither a string nor an error; its %+v holds a secret.
type endpoint struct{ URL string }

// Every place a value can sit in a record is redacted: the message, plain
// attributes, errors, LogValuers, groups nested in groups, and attributes
// and groups added with With and WithGroup before the record exists.
// Values of other kinds keep their kind, but a duration reads like "1.5s",
// not as the nanoseconds the JSON handler would write.
func TestLoggerRedactsEveryValue(t *testing.T) {
	var buf bytes.Buffer
	base := slog.New(slog.NewJSONHandler(&buf, nil))
	log := redact.Logger(base).With("dsn", "amqp://u:with-secret@h/").WithGroup("g").With("token_in_group", "x?token=group-secret")
	cause := errors.New("POST https://bob:err-secret@hooks.example/x: 500")
	log.Info("sent to https://bob:msg-secret@hooks.example/",
		"plain", "api_key=plain-secret",
		"err", errors.Join(cause, fs.ErrClosed),
		"valuer", secretValue{},
		"any", endpoint{URL: "https://bob:any-secret@h/"},
		slog.Group("inner", "deep", slog.GroupValue(slog.String("auth", "Authorization: Bearer deep-secret-1234"))),
		"n", 42, "took", 1500*time.Millisecond, "ok", true, "clean", "v=1")

	out := buf.String()
	for _, secret := range []string{"with-secret", "group-secret", "msg-secret", "plain-secret", "err-secret", "lv-secret", "any-secret", "deep-secret-1234"} {
		if strings.Contains(out, secret) {
			t.Errorf("%s left in the log line %s", secret, out)
		}
	}
	var line struct {
		Msg string `json:"msg"`
		DSN string `json:"dsn"`
		G   struct {
			Token string  `json:"token_in_group"`
			Err   string  `json:"err"`
			N     float64 `json:"n"`
			Took  string  `json:"took"`
			OK    bool    `json:"ok"`
			Clean string  `json:"clean"`
			Inner struct {
				Deep struct {
					Auth string `json:"auth"`
				} `json:"deep"`
			} `json:"inner"`
		} `json:"g"`
	}
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatalf("log line %s: %v", out, err)
	}
	if line.Msg != "sent to https://bob:xxxxx@hooks.example/" || line.DSN != "amqp://u:xxxxx@h/" || line.G.Token != "x?token=xxxxx" ||
		line.G.Inner.Deep.Auth != "Authorization: Bearer xxxxx" || !strings.HasPrefix(line.G.Err, "POST https://bob:xxxxx@hooks.example/x: 500") {
		t.Errorf("redacted values not where they belong: %s", out)
	}
	if line.G.N != 42 || line.G.Took != "1.5s" || !line.G.OK || line.G.Clean != "v=1" {
		t.Errorf("values without secrets changed: %s", out)
	}
}

// An error attribute stays an error for handlers that look into it.
func TestLoggerKeepsErrorsErrors(t *testing.T) {
	var got []error
	log := redact.Logger(slog.New(recordingHandler{&got}))
	cause := errors.New("dial redis://:pw-secret@cache:6379/0")
	log.Error("down", "error", errors.Join(cause, fs.ErrClosed), "clean", fs.ErrNotExist)
	if len(got) != 2 {
		t.Fatalf("got %d error values, want 2", len(got))
	}
	if strings.Contains(got[0].Error(), "pw-secret") || !errors.Is(got[0], cause) || !errors.Is(got[0], fs.ErrClosed) {
		t.Errorf("error value %q: want it redacted and still wrapping its causes", got[0])
	}
	if got[1] != fs.ErrNotExist {
		t.Errorf("an error without secrets became %#v, want it unchanged", got[1])
	}
}

// recordingHandler keeps the error values of the records it handles.
type recordingHandler struct{ errs *[]error }

func (recordingHandler) Enabled(_ context.Context, _ slog.Level) bool { return true }
func (h recordingHandler) Handle(_ context.Context, r slog.Record) error {
	r.Attrs(func(a slog.Attr) bool {
		if err, ok := a.Value.Any().(error); ok {
			*h.errs = append(*h.errs, err)
		}
		return true
	})
	return nil
}
func (h recordingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h recordingHandler) WithGroup(string) slog.Handler      { return h }

func TestLoggerWrapsOnceAndFollowsLevels(t *testing.T) {
	var buf bytes.Buffer
	base := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn}))
	log := redact.Logger(base)
	if redact.Logger(log) != log {
		t.Error("a redacting logger was wrapped again")
	}
	if log.Enabled(context.Background(), slog.LevelInfo) || !log.Enabled(context.Background(), slog.LevelWarn) {
		t.Error("the redacting logger does not follow its handler's level")
	}
	if redact.Logger(nil) == nil {
		t.Error("Logger(nil) must stand for slog.Default()")
	}
}

func ExampleLogger() {
	log := redact.Logger(slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{} // a stable example
			}
			return a
		},
	})))
	log.Warn("webhook failed", "error", errors.New("POST https://bob:s3cr3t@hooks.example/x?token=abc: 500"))
	// Output:
	// level=WARN msg="webhook failed" error="POST https://bob:xxxxx@hooks.example/x?token=xxxxx: 500"
}

// A duration logged through Logger reads as a person writes it, in the
// JSON and the text handler alike, to a sensible precision.
func TestLoggerWritesDurationsForPeople(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{1500 * time.Millisecond, "1.5s"},
		{1234567891 * time.Nanosecond, "1.235s"},
		{2*time.Minute + 3400*time.Millisecond, "2m3.4s"},
		{250*time.Millisecond + 40*time.Nanosecond, "250ms"},
		{250 * time.Microsecond, "250µs"},
		{-1500 * time.Millisecond, "-1.5s"},
	} {
		var js, text bytes.Buffer
		redact.Logger(slog.New(slog.NewJSONHandler(&js, nil))).Info("m", "retry_in", tc.d, slog.Group("g", slog.Duration("delay", tc.d)))
		redact.Logger(slog.New(slog.NewTextHandler(&text, nil))).With("took", tc.d).Info("m")
		var line struct {
			RetryIn string `json:"retry_in"`
			G       struct {
				Delay string `json:"delay"`
			} `json:"g"`
		}
		if err := json.Unmarshal(js.Bytes(), &line); err != nil || line.RetryIn != tc.want || line.G.Delay != tc.want {
			t.Errorf("%d ns: JSON line %s (%v), want %q", int64(tc.d), js.String(), err, tc.want)
		}
		if !strings.Contains(text.String(), " took="+tc.want+"\n") {
			t.Errorf("%d ns: text line %q, want took=%s", int64(tc.d), text.String(), tc.want)
		}
	}
}
