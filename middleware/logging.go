package middleware

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/internal/redact"
)

// LoggingOptions configures [Logging]. The zero value is ready to use.
type LoggingOptions struct {
	// SuccessLevel is the level of the line for an event that was handled,
	// skipped or found to be a duplicate: outcomes that need nobody's
	// attention. Default slog.LevelInfo (the zero value); slog.LevelDebug
	// keeps a busy consumer's log to what went wrong.
	SuccessLevel slog.Level
}

// Logging writes one line to logger for every message, after the handlers
// below it return, with the message's event_id, event_type, consumer,
// attempt, max_attempts, duration and outcome (as [warren.Classify] names
// it), plus the error, the requested delay and, after a panic caught by
// [Recover] below, the stack. Durations are text ("1.5ms", "30s"), in the
// JSON handler too.
//
// Levels follow what the outcome asks of a reader: done, skipped and
// duplicate at opts.SuccessLevel; deferred at Info; a transient failure
// that will be retried at Warn; a permanent failure, or a transient one on
// the last attempt (exhausted: it will be dead-lettered), at Error.
//
// Every line is redacted (internal/redact): credentials that an error
// quotes are masked. A nil logger means slog.Default().
func Logging(logger *slog.Logger, opts LoggingOptions) warren.Middleware {
	log := redacting(logger)
	return func(next warren.Handler) warren.Handler {
		return warren.HandlerFunc(func(ctx context.Context, m *warren.Message) error {
			start := time.Now()
			err := next.Handle(ctx, m)
			logOutcome(ctx, log(), opts, m, err, time.Since(start))
			return err
		})
	}
}

// redacting returns the logger a middleware writes to: logger, redacted,
// or when logger is nil slog.Default(), looked up at each call so that
// slog.SetDefault after startup applies.
func redacting(logger *slog.Logger) func() *slog.Logger {
	if logger == nil {
		return func() *slog.Logger { return redact.Logger(slog.Default()) }
	}
	logger = redact.Logger(logger)
	return func() *slog.Logger { return logger }
}

func logOutcome(ctx context.Context, logger *slog.Logger, opts LoggingOptions, m *warren.Message, err error, took time.Duration) {
	outcome, delay := warren.Classify(err)
	exhausted := outcome == warren.OutcomeRetry && m.LastAttempt()
	level, msg := opts.SuccessLevel, ""
	switch {
	case outcome == warren.OutcomeDone:
		msg = "event handled"
	case outcome == warren.OutcomeSkipped:
		msg = "event skipped"
	case outcome == warren.OutcomeDuplicate:
		msg = "event is a duplicate"
	case outcome == warren.OutcomeDeferred:
		level, msg = slog.LevelInfo, "event deferred"
	case exhausted:
		level, msg = slog.LevelError, "event failed, attempts exhausted, will be dead-lettered"
	case outcome == warren.OutcomeRetry:
		level, msg = slog.LevelWarn, "event failed, will retry"
	default:
		level, msg = slog.LevelError, "event failed permanently, will be dead-lettered"
	}
	if !logger.Enabled(ctx, level) {
		return
	}
	attrs := []slog.Attr{
		slog.String("event_id", m.Event.ID),
		slog.String("event_type", m.Event.Type),
		slog.String("consumer", m.Consumer),
		slog.Int("attempt", m.Attempt),
		slog.Int("max_attempts", m.MaxAttempts),
		slog.Duration("duration", took),
		slog.String("outcome", outcome.String()),
	}
	if exhausted {
		attrs = append(attrs, slog.Bool("exhausted", true))
	}
	if err != nil {
		attrs = append(attrs, slog.String("error", err.Error()))
	}
	if delay > 0 {
		attrs = append(attrs, slog.Duration("delay", delay))
	}
	if pe := (*PanicError)(nil); errors.As(err, &pe) {
		attrs = append(attrs, slog.String("stack", string(pe.Stack)))
	}
	logger.LogAttrs(ctx, level, msg, attrs...)
}
