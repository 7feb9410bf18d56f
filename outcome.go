package warren

import (
	"errors"
	"fmt"
	"time"
)

// Outcome is what a handler's error means for its message.
type Outcome uint8

// The outcomes, in the order the consumer's ack policy lists them.
const (
	// OutcomeDone: handled; acknowledge.
	OutcomeDone Outcome = iota
	// OutcomeSkipped: not for this consumer (a filter said so); acknowledge.
	OutcomeSkipped
	// OutcomeDuplicate: already handled before; acknowledge.
	OutcomeDuplicate
	// OutcomeRetry: a transient failure; retry after a delay, spending an
	// attempt.
	OutcomeRetry
	// OutcomeDeferred: not now (another worker holds the event); retry after
	// a short delay without spending an attempt.
	OutcomeDeferred
	// OutcomePermanent: retrying cannot help; dead-letter now.
	OutcomePermanent
)

var outcomeNames = [...]string{"done", "skipped", "duplicate", "retry", "deferred", "permanent"}

func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return fmt.Sprintf("Outcome(%d)", uint8(o))
}

// Sentinel errors for errors.Is. Each outcome error matches its sentinel and
// also unwraps to the cause it was built from.
var (
	ErrSkipped   = errors.New("skipped")
	ErrDuplicate = errors.New("duplicate")
	ErrDeferred  = errors.New("deferred")
	// ErrUnavailable is matched by the errors of [Unavailable], which are
	// deferrals too (they also match ErrDeferred).
	ErrUnavailable = errors.New("dependency unavailable")
	ErrPermanent   = errors.New("permanent failure")
	// ErrUndecodable is matched by the errors of [Undecodable], which are
	// permanent failures too (they also match ErrPermanent).
	ErrUndecodable = errors.New("undecodable event")
)

// Skip returns an error that acknowledges the message as skipped: the event
// is not meant for this consumer. The reason shows in logs.
func Skip(reason string) error {
	return &outcomeError{outcome: OutcomeSkipped, err: errors.New(reason)}
}

// Duplicate returns an error that acknowledges the message as a duplicate of
// one already handled.
func Duplicate(reason string) error {
	return &outcomeError{outcome: OutcomeDuplicate, err: errors.New(reason)}
}

// Defer asks for the message to come back after about d without spending
// an attempt. It is for "busy, not failed": the deduplication middleware
// returns it when another worker holds the event's lease.
func Defer(d time.Duration, reason string) error {
	return &outcomeError{outcome: OutcomeDeferred, delay: d, err: errors.New(reason)}
}

// Unavailable defers the message, as [Defer] does, because a dependency
// the message needs before its handler can run (a dedup store) could not
// be reached: err says why. The handler did not run, so the failure is not
// the message's and spends no attempt; the message comes back after about
// d however long the outage lasts, and is never dead-lettered for it. The
// consumer counts these deferrals apart (consumer.Stats.Unavailable).
// Unavailable(d, nil) returns nil.
func Unavailable(d time.Duration, err error) error {
	if err == nil {
		return nil
	}
	return &outcomeError{outcome: OutcomeDeferred, delay: d, err: err, unavailable: true}
}

// Permanent marks err as one that retrying cannot fix, so the message is
// dead-lettered at once. Permanent(nil) returns nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &outcomeError{outcome: OutcomePermanent, err: err}
}

// Undecodable marks err as saying that the message's event is not what
// its handler takes (a payload field of another type, say): retrying
// cannot help, and the consumer dead-letters the message at once in the
// class a body that is no event gets, undecodable, so that `warren dlq
// stats` counts it with them and not with the handlers' own failures.
// [Typed] returns it. Undecodable(nil) returns nil.
func Undecodable(err error) error {
	if err == nil {
		return nil
	}
	return &outcomeError{outcome: OutcomePermanent, err: err, undecodable: true}
}

// RetryAfter marks err as transient and hints how long to wait before the
// next attempt (a webhook's Retry-After, a rate limit's reset). The consumer
// rounds the hint up to its nearest retry tier. RetryAfter(d, nil) returns
// nil.
func RetryAfter(d time.Duration, err error) error {
	if err == nil {
		return nil
	}
	return &outcomeError{outcome: OutcomeRetry, delay: d, err: err}
}

// Classify tells what err means for its message, and the delay it asks for
// (zero when it names none). nil is [OutcomeDone]; an error that none of this
// package's constructors made is [OutcomeRetry]. When outcome errors are
// nested, the outermost one decides.
func Classify(err error) (Outcome, time.Duration) {
	if err == nil {
		return OutcomeDone, 0
	}
	var oe *outcomeError
	if errors.As(err, &oe) {
		return oe.outcome, oe.delay
	}
	return OutcomeRetry, 0
}

type outcomeError struct {
	outcome     Outcome
	delay       time.Duration
	err         error
	unavailable bool // made by Unavailable
	undecodable bool // made by Undecodable
}

func (e *outcomeError) Error() string {
	switch e.outcome {
	case OutcomeSkipped, OutcomeDuplicate, OutcomeDeferred:
		return e.outcome.String() + ": " + e.err.Error()
	default:
		return e.err.Error()
	}
}

func (e *outcomeError) Unwrap() error { return e.err }

func (e *outcomeError) Is(target error) bool {
	switch target {
	case ErrSkipped:
		return e.outcome == OutcomeSkipped
	case ErrDuplicate:
		return e.outcome == OutcomeDuplicate
	case ErrDeferred:
		return e.outcome == OutcomeDeferred
	case ErrUnavailable:
		return e.unavailable
	case ErrUndecodable:
		return e.undecodable
	case ErrPermanent:
		return e.outcome == OutcomePermanent
	}
	return false
}
