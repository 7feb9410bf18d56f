package middleware_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/middleware"
)

type logLine struct {
	Level       string  `json:"level"`
	Msg         string  `json:"msg"`
	EventID     string  `json:"event_id"`
	EventType   string  `json:"event_type"`
	Consumer    string  `json:"consumer"`
	Attempt     int     `json:"attempt"`
	MaxAttempts int     `json:"max_attempts"`
	Duration    *string `json:"duration"`
	Outcome     string  `json:"outcome"`
	Exhausted   bool    `json:"exhausted"`
	Error       string  `json:"error"`
	Delay       *string `json:"delay"`
	Stack       *string `json:"stack"`
}

// logOnce runs a handler returning err (or panicking with it) behind
// Logging and returns the lines written.
func logOnce(t *testing.T, opts middleware.LoggingOptions, level slog.Level, m *warren.Message, h warren.Handler) []logLine {
	t.Helper()
	var buf bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: level}))
	middleware.Chain(middleware.Logging(logger, opts), middleware.Recover())(h).Handle(context.Background(), m)
	var lines []logLine
	sc := bufio.NewScanner(&buf)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var l logLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("log line %q is not JSON: %v", sc.Text(), err)
		}
		lines = append(lines, l)
	}
	return lines
}

func returning(err error) warren.Handler {
	return warren.HandlerFunc(func(context.Context, *warren.Message) error { return err })
}

func TestLoggingOneLinePerOutcome(t *testing.T) {
	boom := errors.New("connection refused")
	for _, tc := range []struct {
		name       string
		handler    warren.Handler
		attempt    int
		level, msg string
		outcome    string
		exhausted  bool
		err        string
		delay      time.Duration
	}{
		{"done", returning(nil), 1, "INFO", "event handled", "done", false, "", 0},
		{"skipped", returning(warren.Skip("not ours")), 1, "INFO", "event skipped", "skipped", false, "skipped: not ours", 0},
		{"duplicate", returning(warren.Duplicate("seen")), 2, "INFO", "event is a duplicate", "duplicate", false, "duplicate: seen", 0},
		{"deferred", returning(warren.Defer(5*time.Second, "busy")), 1, "INFO", "event deferred", "deferred", false, "deferred: busy", 5 * time.Second},
		{"retry", returning(boom), 2, "WARN", "event failed, will retry", "retry", false, "connection refused", 0},
		{"retry after", returning(warren.RetryAfter(time.Minute, boom)), 1, "WARN", "event failed, will retry", "retry", false, "connection refused", time.Minute},
		{"exhausted", returning(boom), 5, "ERROR", "event failed, attempts exhausted, will be dead-lettered", "retry", true, "connection refused", 0},
		{"permanent", returning(warren.Permanent(boom)), 1, "ERROR", "event failed permanently, will be dead-lettered", "permanent", false, "connection refused", 0},
		{"panic", panicking("nil map"), 1, "WARN", "event failed, will retry", "retry", false, "panic: nil map", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &warren.Message{
				Event:    warren.Event{ID: "evt-9", Type: "workitem.updated"},
				Consumer: "webhook", Attempt: tc.attempt, MaxAttempts: 5,
			}
			lines := logOnce(t, middleware.LoggingOptions{}, slog.LevelDebug, m, tc.handler)
			if len(lines) != 1 {
				t.Fatalf("%d lines, want 1", len(lines))
			}
			l := lines[0]
			if l.Level != tc.level || l.Msg != tc.msg || l.Outcome != tc.outcome || l.Exhausted != tc.exhausted || l.Error != tc.err {
				t.Errorf("line = %+v\nwant level %s, msg %q, outcome %s, exhausted %v, error %q", l, tc.level, tc.msg, tc.outcome, tc.exhausted, tc.err)
			}
			if l.EventID != "evt-9" || l.EventType != "workitem.updated" || l.Consumer != "webhook" || l.Attempt != tc.attempt || l.MaxAttempts != 5 {
				t.Errorf("line lacks the message's fields: %+v", l)
			}
			// Durations read as people write them ("1.5s"), not nanoseconds.
			if d, err := time.ParseDuration(deref(l.Duration)); err != nil || d < 0 {
				t.Errorf("duration = %q, want a non-negative duration like 1.5ms", deref(l.Duration))
			}
			if (l.Delay == nil) != (tc.delay == 0) || (l.Delay != nil && *l.Delay != tc.delay.String()) {
				t.Errorf("delay = %v, want %v", l.Delay, tc.delay)
			}
			if (l.Stack != nil) != (tc.name == "panic") || (l.Stack != nil && !strings.Contains(*l.Stack, "panicking")) {
				t.Errorf("stack = %v; want one, showing the panic, only after a panic", l.Stack)
			}
		})
	}
}

func TestLoggingSuccessLevel(t *testing.T) {
	m := &warren.Message{Event: warren.Event{ID: "e", Type: "t"}, Consumer: "c", Attempt: 1}
	quiet := middleware.LoggingOptions{SuccessLevel: slog.LevelDebug}
	for _, err := range []error{nil, warren.Skip("x"), warren.Duplicate("y")} {
		if lines := logOnce(t, quiet, slog.LevelInfo, m, returning(err)); len(lines) != 0 {
			t.Errorf("%v at SuccessLevel Debug under an Info logger: %d lines, want none", err, len(lines))
		}
		if lines := logOnce(t, quiet, slog.LevelDebug, m, returning(err)); len(lines) != 1 || lines[0].Level != "DEBUG" {
			t.Errorf("%v at SuccessLevel Debug under a Debug logger: %+v, want one DEBUG line", err, lines)
		}
	}
	if lines := logOnce(t, quiet, slog.LevelInfo, m, returning(errors.New("x"))); len(lines) != 1 {
		t.Errorf("a failure is logged whatever SuccessLevel says; got %d lines", len(lines))
	}
}

func TestLoggingReturnsTheError(t *testing.T) {
	want := warren.Permanent(errors.New("x"))
	err := middleware.Logging(slog.New(slog.DiscardHandler), middleware.LoggingOptions{})(returning(want)).Handle(context.Background(), &warren.Message{})
	if err != want {
		t.Errorf("Logging changed the error to %v", err)
	}
}

// The error and a recovered panic's stack are logged with their secrets
// masked: a handler's error may quote an endpoint's password or ?token=.
func TestLoggingRedactsSecrets(t *testing.T) {
	m := &warren.Message{Event: warren.Event{ID: "e1"}, Attempt: 1, MaxAttempts: 3}
	for name, h := range map[string]warren.Handler{
		"error": returning(errors.New("POST https://bob:s3cr3t-pw@hooks.example/x?token=tok-123&v=1: 500")),
		"panic": warren.HandlerFunc(func(context.Context, *warren.Message) error {
			panic("POST https://bob:s3cr3t-pw@hooks.example/x?token=tok-123&v=1: 500")
		}),
	} {
		lines := logOnce(t, middleware.LoggingOptions{}, slog.LevelInfo, m, h)
		if len(lines) != 1 {
			t.Fatalf("%s: %d lines, want 1", name, len(lines))
		}
		text := lines[0].Error
		if lines[0].Stack != nil {
			text += *lines[0].Stack
		}
		if strings.Contains(text, "s3cr3t-pw") || strings.Contains(text, "tok-123") || !strings.Contains(lines[0].Error, "hooks.example/x?token=xxxxx&v=1") {
			t.Errorf("%s: logged error %q is not redacted as expected", name, lines[0].Error)
		}
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
