package consumer_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/consumer"
	"github.com/warrenmq/warren/dlq"
	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/middleware"
)

// newLoggedConsumer is newConsumer logging everything, down to debug, into
// the returned buffer, with the Logging and Recover middleware in front of
// the handlers as a service would have them.
func newLoggedConsumer(t *testing.T) (*consumer.BaseConsumer, *logLines) {
	t.Helper()
	logs := &logLines{}
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c := newConsumer(t, func(cfg *consumer.Config) {
		cfg.Logger = logger
		cfg.MaxAttempts = 2
		cfg.RetryDelays = []time.Duration{20 * time.Millisecond}
	})
	c.Use(middleware.Logging(logger, middleware.LoggingOptions{}))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("consumer log:\n%s", logs)
		}
	})
	return c, logs
}

// A webhook's error quotes its endpoint's URL, password and ?token=
// included. Neither reaches the retry's or the dead letter's x-warren-error
// header, nor any log line (the consumer's or the Logging middleware's);
// the host and the harmless parameters stay, so the error still says what
// failed.
func TestHandlerErrorSecretsStayOutOfHeadersAndLogs(t *testing.T) {
	t.Parallel()
	c, logs := newLoggedConsumer(t)
	sendErr := errors.New("POST https://bob:s3cr3t-pw@hooks.example/x?token=tok-123&v=1: 500 Internal Server Error")
	c.HandleFunc("", func(ctx context.Context, m *warren.Message) error { return sendErr })
	start(t, c)
	topo := c.Topology()
	newPublisher(t).events(topo.Exchange, "", event("leaky", "webhook.send"))

	d := getOne(t, testenv.Channel(t), topo.DLQ, 60*time.Second)
	meta := dlq.ParseMetadata(d.Headers)
	if meta.Class != dlq.ClassExhausted || meta.Attempts != 2 {
		t.Errorf("dead letter class %q after %d attempts, want exhausted after 2 (the redacted error must still classify)", meta.Class, meta.Attempts)
	}
	// Each line is written, but not in the order of the attempts: a move's
	// line ("retry scheduled", "dead-lettered") follows the confirm of its
	// copy, and on a busy machine the retried copy can be handled and
	// dead-lettered before the first attempt's worker logs its retry.
	for _, line := range []string{"dead-lettered", "retry scheduled", "event failed, will retry", "event failed, attempts exhausted"} {
		testenv.WaitFor(t, 60*time.Second, "the "+line+" log line", func() bool { return logs.has(line) })
	}
	log := logs.String()
	for where, text := range map[string]string{"x-warren-error header": meta.Error, "log": log} {
		for _, secret := range []string{"s3cr3t-pw", "tok-123"} {
			if strings.Contains(text, secret) {
				t.Errorf("%s reveals %q (header: %q)", where, secret, meta.Error)
			}
		}
		for _, kept := range []string{"hooks.example/x", "v=1", "500 Internal Server Error"} {
			if !strings.Contains(text, kept) {
				t.Errorf("%s lost %q (header: %q)", where, kept, meta.Error)
			}
		}
	}
}

// A panicking handler's dead letter says "handler panicked: <value>",
// redacted, with no stack and no source path: whoever reads the DLQ is not
// owed the service's source layout. The stack goes to the log.
func TestPanicStackGoesToTheLogNotTheHeader(t *testing.T) {
	t.Parallel()
	c, logs := newLoggedConsumer(t)
	c.HandleFunc("", func(ctx context.Context, m *warren.Message) error {
		panic("GET https://ann:pan1c-pw@api.example/v1 failed")
	})
	start(t, c)
	topo := c.Topology()
	newPublisher(t).events(topo.Exchange, "", event("panicky", "webhook.send"))

	d := getOne(t, testenv.Channel(t), topo.DLQ, 60*time.Second)
	header := dlq.ParseMetadata(d.Headers).Error
	if want := "handler panicked: GET https://ann:xxxxx@api.example/v1 failed"; header != want {
		t.Errorf("x-warren-error %q, want %q", header, want)
	}
	for _, leak := range []string{".go:", "goroutine", "runtime/debug", "pan1c-pw"} {
		if strings.Contains(header, leak) {
			t.Errorf("x-warren-error holds %q: %s", leak, header)
		}
	}
	testenv.WaitFor(t, 60*time.Second, "the dead-lettered log line", func() bool { return logs.has("dead-lettered") })
	log := logs.String()
	if strings.Count(log, `msg="handler panicked"`) != 2 {
		t.Errorf("want one \"handler panicked\" line per attempt (2)")
	}
	if !strings.Contains(log, "stack=") || !strings.Contains(log, "redact_test.go:") {
		t.Errorf("log lacks the panic's stack with this test's source line")
	}
	if strings.Contains(log, "pan1c-pw") {
		t.Errorf("log reveals the panic value's password")
	}
}

// A broker URL whose password does not parse (an unescaped '%' or '#') is
// a configuration error, and neither the error nor the pieces of the URL
// that net/url quotes reveal the password.
func TestUnparsableURLIsRefusedWithoutItsPassword(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ url, secret, piece string }{
		{"amqp://guest:50%off@127.0.0.1:5672/", "50%off", "%of"},
		{"amqp://guest:Hunter2#x@127.0.0.1:5672/", "Hunter2#x", "Hunter2"},
	} {
		_, err := consumer.New(consumer.Config{Name: "redacted", URL: tc.url})
		if !errors.Is(err, consumer.ErrInvalidConfig) {
			t.Fatalf("New with %s: %v, want ErrInvalidConfig", tc.url, err)
		}
		if msg := err.Error(); strings.Contains(msg, tc.secret) || strings.Contains(msg, tc.piece) || !strings.Contains(msg, "amqp://guest:xxxxx@") {
			t.Errorf("error reveals the password or not the URL: %s", msg)
		}
	}
}

// A service logs through its consumer's Config().Logger (examples/webhook
// logs its dedup store's errors there); those lines are redacted like the
// consumer's own, whatever logger the service configured.
func TestConfigLoggerRedacts(t *testing.T) {
	t.Parallel()
	logs := &logLines{}
	c, err := consumer.New(consumer.Config{Name: testenv.Name(t, "q"), URL: testenv.AMQPURL(t), Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	const password = "pw-s3cr3t-31"
	c.Config().Logger.Warn("could not release a webhook claim", "error", errors.New("dial redis://:"+password+"@cache:6379/0: i/o timeout"))
	if log := logs.String(); strings.Contains(log, password) || !strings.Contains(log, "redis://:xxxxx@cache:6379/0") {
		t.Errorf("want the error redacted: %s", log)
	}
}
