package redact

import (
	"context"
	"fmt"
	"log/slog"
	"time"
)

// Logger returns a logger that writes to logger's handler with every line
// put through [Secrets] first: the message, every string value, the text
// of every error value, inside groups and in attributes added with With.
// A nil logger stands for slog.Default() at the time of the call, and a
// logger that Logger returned comes back as it is.
//
// Applied once where a package takes its logger, it covers every line the
// package writes, future ones included, so no call site has to remember to
// redact. Durations are written as text a person reads ("1.5s", "250ms",
// see [Duration]): a JSON handler would write them as integer nanoseconds,
// which nobody reading a log wants to count digits of, and since every
// package's logger passes here this is the one place that fixes all of
// them. Numbers, times and booleans pass unchanged. Any other
// value is logged unchanged unless its %+v text holds something Secrets
// masks, in which case it is logged as that masked text. Keys are not
// redacted: they are chosen by code, not by the data.
func Logger(logger *slog.Logger) *slog.Logger {
	if logger == nil {
		logger = slog.Default()
	}
	if _, ok := logger.Handler().(handler); ok {
		return logger
	}
	return slog.New(handler{logger.Handler()})
}

// handler redacts a record and passes it on to next.
type handler struct{ next slog.Handler }

func (h handler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.next.Enabled(ctx, level)
}

func (h handler) Handle(ctx context.Context, r slog.Record) error {
	clean := slog.NewRecord(r.Time, r.Level, Secrets(r.Message), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		clean.AddAttrs(attr(a))
		return true
	})
	return h.next.Handle(ctx, clean)
}

func (h handler) WithAttrs(as []slog.Attr) slog.Handler {
	return handler{h.next.WithAttrs(attrs(as))}
}

func (h handler) WithGroup(name string) slog.Handler {
	return handler{h.next.WithGroup(name)}
}

func attrs(as []slog.Attr) []slog.Attr {
	out := make([]slog.Attr, len(as))
	for i, a := range as {
		out[i] = attr(a)
	}
	return out
}

// attr returns a with its value redacted; a LogValuer is resolved first,
// since what it resolves to is what the next handler would print.
func attr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		v = slog.StringValue(Secrets(v.String()))
	case slog.KindDuration:
		v = slog.StringValue(Duration(v.Duration()))
	case slog.KindGroup:
		v = slog.GroupValue(attrs(v.Group())...)
	case slog.KindAny:
		v = anyValue(v.Any())
	}
	return slog.Attr{Key: a.Key, Value: v}
}

// Duration renders d for a log line, to a precision a person cares about:
// milliseconds from a second up (1.235s, 2m3.4s), microseconds below
// (250ms, 1.5ms), and as it is under a millisecond (250µs).
func Duration(d time.Duration) string {
	switch a := d.Abs(); {
	case a >= time.Second:
		d = d.Round(time.Millisecond)
	case a >= time.Millisecond:
		d = d.Round(time.Microsecond)
	}
	return d.String()
}

func anyValue(x any) slog.Value {
	if err, ok := x.(error); ok {
		// Still an error, matching errors.Is and errors.As, for handlers
		// that look into it; err itself when nothing was masked.
		return slog.AnyValue(Error(err))
	}
	text := fmt.Sprintf("%+v", x)
	if clean := Secrets(text); clean != text {
		return slog.StringValue(clean)
	}
	return slog.AnyValue(x)
}
