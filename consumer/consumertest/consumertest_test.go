package consumertest_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/consumer"
	"github.com/warrenmq/warren/consumer/consumertest"
	"github.com/warrenmq/warren/dlq"
)

// The outcomes the examples do not show.
func TestDeliverOutcomes(t *testing.T) {
	t.Parallel()
	c, err := consumer.New(consumer.Config{Name: "billing", Unhandled: consumer.DeadLetterUnhandled})
	if err != nil {
		t.Fatal(err)
	}
	c.HandleFunc("invoice.", func(ctx context.Context, m *warren.Message) error {
		switch m.Event.EntityID {
		case "defer":
			return warren.Defer(5*time.Second, "busy")
		case "unavailable":
			return warren.Unavailable(time.Second, errors.New("store down"))
		case "panic":
			panic("nil map")
		case "headers":
			if m.Headers["traceparent"] != "00-abc-def-01" {
				return warren.Permanent(errors.New("headers not delivered"))
			}
		}
		return nil
	})
	ev := invoicePaid
	with := func(entity string) warren.Event { e := ev; e.EntityID = entity; return e }
	ctx := context.Background()

	t.Run("deferred keeps the attempt", func(t *testing.T) {
		r := consumertest.Deliver(ctx, c, consumertest.Delivery{Event: with("defer"), Attempt: 2})
		if r.Disposition != consumer.Deferred || r.Queue != "billing.retry.10s" || r.Delay != 10*time.Second || r.Unavailable {
			t.Fatalf("got %+v", r)
		}
		if n := dlq.ParseMetadata(r.Headers).Attempts; n != 1 {
			t.Errorf("a deferral changed the attempts made to %d, want 1", n)
		}
	})
	t.Run("unavailable", func(t *testing.T) {
		r := consumertest.Deliver(ctx, c, consumertest.Delivery{Event: with("unavailable")})
		if r.Disposition != consumer.Deferred || !r.Unavailable || r.Queue != "billing.retry.1s" {
			t.Fatalf("got %+v", r)
		}
	})
	t.Run("panic retries", func(t *testing.T) {
		r := consumertest.Deliver(ctx, c, consumertest.Delivery{Event: with("panic")})
		if r.Disposition != consumer.Retried || r.Queue != "billing.retry.1s" || r.Err == nil || !strings.Contains(r.Err.Error(), "nil map") {
			t.Fatalf("got %+v", r)
		}
	})
	t.Run("unhandled", func(t *testing.T) {
		other := ev
		other.Type = "customer.created"
		r := consumertest.Deliver(ctx, c, consumertest.Delivery{Event: other})
		if r.Disposition != consumer.DeadLettered || r.Class != dlq.ClassUnhandled || r.Queue != "billing.dlq" {
			t.Fatalf("got %+v", r)
		}
	})
	t.Run("headers reach the handler", func(t *testing.T) {
		r := consumertest.Deliver(ctx, c, consumertest.Delivery{Event: with("headers"), Headers: map[string]any{"traceparent": "00-abc-def-01"}})
		if r.Disposition != consumer.Done {
			t.Fatalf("got %+v", r)
		}
	})
	t.Run("requeued when the grace ran out", func(t *testing.T) {
		ended, cancel := context.WithCancel(ctx)
		cancel()
		r := consumertest.Deliver(ended, c, consumertest.Delivery{Event: with("panic")})
		if r.Disposition != consumer.Requeued || r.Queue != "" || r.Headers != nil {
			t.Fatalf("got %+v", r)
		}
		// An event handled before the grace ran out is still acked.
		if r := consumertest.Deliver(ended, c, consumertest.Delivery{Event: ev}); r.Disposition != consumer.Done {
			t.Fatalf("got %+v", r)
		}
	})
	t.Run("no broker death headers on a copy", func(t *testing.T) {
		dead := map[string]any{"x-death": []any{map[string]any{"queue": "billing", "reason": "expired"}}, "x-first-death-queue": "billing"}
		r := consumertest.Deliver(ctx, c, consumertest.Delivery{Event: with("panic"), Headers: dead})
		if _, ok := r.Headers["x-death"]; ok || r.Headers["x-first-death-queue"] != nil {
			t.Fatalf("a copy keeps the broker's death headers: %v", r.Headers)
		}
	})
}
