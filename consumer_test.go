package warren_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/dlq"
	"github.com/warrenmq/warren/examples/app"
	"github.com/warrenmq/warren/examples/pipeline"
	"github.com/warrenmq/warren/internal/testenv"
)

// TestEndToEnd runs the whole path on real services: application
// transactions write work items and their events through the outbox; the
// relay moves them to a fanout exchange; the webhook consumer delivers them
// to a receiver and the automation consumer runs a rule on them, writing
// its own follow-up events through the outbox in the same transaction.
func TestEndToEnd(t *testing.T) {
	var b [4]byte
	rand.Read(b[:])
	cfg := pipeline.Config{
		AMQPURL:     testenv.AMQPURL(t),
		DatabaseURL: testenv.DatabaseURL(t),
		RedisURL:    testenv.RedisURL(t),
		Names:       pipeline.NamesWithPrefix("wt_e2e_" + hex.EncodeToString(b[:])),
		RetryDelays: []time.Duration{200 * time.Millisecond, time.Second},
		MaxAttempts: 5,
		Logger:      testLogger(t),
	}
	t.Cleanup(func() {
		if err := pipeline.Destroy(context.Background(), cfg); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	var poisonFixed atomic.Bool
	cfg.Answer = func(eventID string, body []byte, seen int) int {
		switch {
		case strings.Contains(string(body), pipeline.PoisonName) && !poisonFixed.Load():
			return 400
		case strings.Contains(string(body), `"event_type":"workitem.created"`) && strings.Contains(string(body), `"id":"user-001"`) && seen == 0:
			return 500 // once: the retry must succeed, and only once
		}
		return 200
	}
	ctx := context.Background()
	p, err := pipeline.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop() })

	exp, err := p.Produce(ctx, pipeline.Workload{UserItems: 10, ImportedItems: 3, Poison: true})
	if err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 60*time.Second, "every event delivered and every rule run", func() bool {
		byEvent, _, err := p.Automation.Runs(ctx)
		return err == nil && len(p.Receiver.Accepted()) == exp.Delivered && len(byEvent) == exp.RuleRuns &&
			p.Webhook.Stats().DeadLettered == 1
	})

	accepted := p.Receiver.Accepted()
	byEvent, followUps, err := p.Automation.Runs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Run("every event reaches the receiver exactly once, signed", func(t *testing.T) {
		for _, ev := range exp.Events {
			if ev.ID != exp.PoisonID && accepted[ev.ID] != 1 {
				t.Errorf("%s %s accepted %d times", ev.Type, ev.ID, accepted[ev.ID])
			}
		}
		if p.Receiver.Forged() != 0 {
			t.Errorf("%d deliveries failed signature verification", p.Receiver.Forged())
		}
	})
	t.Run("the rule fires once per matching event and never on system events", func(t *testing.T) {
		for _, ev := range exp.Events {
			var data struct {
				StateID string `json:"state_id"`
			}
			ev.Payload.DecodeData(&data)
			matching := ev.Type == app.TypeStateUpdated && data.StateID == "done" && ev.InitiatorType == warren.InitiatorUser
			if want := map[bool]int{true: 1}[matching]; byEvent[ev.ID] != want {
				t.Errorf("%s by %s (state %s): rule ran %d times, want %d", ev.Type, ev.InitiatorType, data.StateID, byEvent[ev.ID], want)
			}
		}
	})
	t.Run("automation's own events are skipped by it and delivered by webhook", func(t *testing.T) {
		if len(followUps) != exp.FollowUps {
			t.Fatalf("%d follow-up events, want %d", len(followUps), exp.FollowUps)
		}
		for _, id := range followUps {
			if accepted[id] != 1 {
				t.Errorf("follow-up %s delivered %d times", id, accepted[id])
			}
			if byEvent[id] != 0 {
				t.Errorf("follow-up %s triggered the rule again", id)
			}
		}
		if s := p.Automation.Stats(); s.Skipped < uint64(exp.FollowUps) {
			t.Errorf("automation skipped %d events, want at least the %d follow-ups", s.Skipped, exp.FollowUps)
		}
	})
	t.Run("a 500 is retried and succeeds once", func(t *testing.T) {
		id := exp.Events[0].ID // user-001's workitem.created is the second item's first event
		for _, ev := range exp.Events {
			if ev.Type == "workitem.created" && ev.EntityID == "user-001" {
				id = ev.ID
			}
		}
		if attempts := p.Receiver.Attempts()[id]; attempts != 2 || accepted[id] != 1 {
			t.Errorf("the event answered 500 once was delivered %d times and accepted %d", attempts, accepted[id])
		}
		if p.Webhook.Stats().Retried == 0 {
			t.Error("the webhook consumer counted no retry")
		}
	})

	t.Run("a 400 dead-letters the event and warren dlq replay brings it back", func(t *testing.T) {
		ch := testenv.Channel(t)
		dlqName := dlq.QueueName(cfg.Names.WebhookQueue)
		if depth := testenv.QueueDepth(t, ch, dlqName); depth != 1 {
			t.Fatalf("webhook DLQ holds %d messages, want the poison event", depth)
		}
		if depth := testenv.QueueDepth(t, ch, dlq.QueueName(cfg.Names.AutomationQueue)); depth != 0 {
			t.Errorf("automation DLQ holds %d messages, want none", depth)
		}
		poisonFixed.Store(true) // the receiver's bug is fixed
		out, err := exec.Command(warrenBinary(t), "dlq", "replay", "--queue", cfg.Names.WebhookQueue, "--yes").CombinedOutput()
		if err != nil {
			t.Fatalf("warren dlq replay: %v\n%s", err, out)
		}
		testenv.WaitFor(t, 60*time.Second, "the replayed poison event to be delivered", func() bool {
			return p.Receiver.Accepted()[exp.PoisonID] == 1
		})
		if depth := testenv.QueueDepth(t, ch, dlqName); depth != 0 {
			t.Errorf("webhook DLQ holds %d messages after the replay", depth)
		}
	})

	t.Run("redelivered copies are duplicates to both consumers", func(t *testing.T) {
		before, beforeAuto := p.Webhook.Stats().Duplicates, p.Automation.Stats().Duplicates
		copies := pipeline.HandledByBoth(exp.Events, 3)
		if len(copies) != 3 {
			t.Fatalf("the workload wrote %d events both consumers handle, want at least 3", len(copies))
		}
		if err := p.Redeliver(ctx, copies); err != nil {
			t.Fatal(err)
		}
		testenv.WaitFor(t, 60*time.Second, "both consumers to see the copies", func() bool {
			return p.Webhook.Stats().Duplicates-before == 3 && p.Automation.Stats().Duplicates-beforeAuto == 3
		})
		for _, ev := range copies {
			if n := p.Receiver.Accepted()[ev.ID]; n != 1 {
				t.Errorf("redelivered %s reached the receiver %d times", ev.ID, n)
			}
		}
	})
	if err := p.Stop(); err != nil {
		t.Errorf("pipeline stopped with: %v", err)
	}
}

// warrenBinary builds cmd/warren once per test run.
func warrenBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "warren")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/warren")
	cmd.Env = os.Environ()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/warren: %v\n%s", err, out)
	}
	return bin
}
