package warren_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/warrenmq/warren"
)

func TestClassify(t *testing.T) {
	cause := errors.New("boom")
	cases := []struct {
		name    string
		err     error
		outcome warren.Outcome
		delay   time.Duration
		is      error
	}{
		{"nil", nil, warren.OutcomeDone, 0, nil},
		{"plain error", cause, warren.OutcomeRetry, 0, nil},
		{"context deadline", context.DeadlineExceeded, warren.OutcomeRetry, 0, nil},
		{"skip", warren.Skip("not mine"), warren.OutcomeSkipped, 0, warren.ErrSkipped},
		{"duplicate", warren.Duplicate("seen"), warren.OutcomeDuplicate, 0, warren.ErrDuplicate},
		{"defer", warren.Defer(2*time.Second, "busy"), warren.OutcomeDeferred, 2 * time.Second, warren.ErrDeferred},
		{"permanent", warren.Permanent(cause), warren.OutcomePermanent, 0, warren.ErrPermanent},
		{"retry after", warren.RetryAfter(time.Minute, cause), warren.OutcomeRetry, time.Minute, nil},
		{"wrapped permanent", fmt.Errorf("deliver: %w", warren.Permanent(cause)), warren.OutcomePermanent, 0, warren.ErrPermanent},
		{"outermost wins", warren.RetryAfter(time.Second, warren.Permanent(cause)), warren.OutcomeRetry, time.Second, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			outcome, delay := warren.Classify(tc.err)
			if outcome != tc.outcome || delay != tc.delay {
				t.Errorf("Classify = %v, %v; want %v, %v", outcome, delay, tc.outcome, tc.delay)
			}
			if tc.is != nil && !errors.Is(tc.err, tc.is) {
				t.Errorf("errors.Is(%v, %v) = false", tc.err, tc.is)
			}
		})
	}
}

func TestOutcomeErrorsKeepTheirCause(t *testing.T) {
	cause := errors.New("boom")
	for _, err := range []error{warren.Permanent(cause), warren.RetryAfter(time.Second, cause)} {
		if !errors.Is(err, cause) {
			t.Errorf("%v does not unwrap to its cause", err)
		}
		if err.Error() != "boom" {
			t.Errorf("Error() = %q, want the cause's text", err.Error())
		}
	}
	if warren.Permanent(nil) != nil || warren.RetryAfter(time.Second, nil) != nil {
		t.Error("wrapping nil must give nil, so `return warren.Permanent(err)` is safe")
	}
	if errors.Is(warren.Skip("x"), warren.ErrPermanent) {
		t.Error("a skip matched ErrPermanent")
	}
}
