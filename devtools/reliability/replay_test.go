package main

import (
	"context"
	"slices"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/dlq"
	"github.com/warrenmq/warren/internal/testenv"
)

// The drain replays an outstanding event dead-lettered as exhausted, and
// nothing else: not an outstanding event dead for another reason, not an
// exhausted one the run is not waiting for (a hostile message that must
// stay dead).
func TestReplayExhaustedMovesOnlyOutstandingExhaustedEvents(t *testing.T) {
	conn, _, top := testenv.NewDeadLetterTopology(t)
	testenv.PublishInOrder(t, conn, top.DLQ, []amqp.Publishing{
		top.Message(testenv.Dead{ID: "waited-for", Type: "workitem.updated", Class: dlq.ClassExhausted, Err: "503", Attempts: 5}),
		top.Message(testenv.Dead{ID: "waited-for-too", Type: "workitem.updated", Class: dlq.ClassPermanent, Err: "refused", Attempts: 1}),
		top.Message(testenv.Dead{ID: "hostile", Type: "workitem.updated", Class: dlq.ClassExhausted, Err: "503", Attempts: 5}),
	})
	var checked []int
	n, problems, err := replayExhausted(context.Background(), testenv.AMQPURL(t), []string{top.Consumer}, []string{"waited-for", "waited-for-too", "never-dead"},
		func(m dlq.Metadata) string { checked = append(checked, m.Attempts); return "too soon" })
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(checked, []int{5}) || len(problems) != 1 {
		t.Errorf("checked the records with attempts %v, problems %q: want the replayed event's record, and its problem", checked, problems)
	}
	if n[top.Consumer] != 1 {
		t.Errorf("replayed %v, want 1 from %s", n, top.Consumer)
	}
	if got := testenv.MessageIDs(testenv.Drain(t, conn, top.Consumer)); !slices.Equal(got, []string{"waited-for"}) {
		t.Errorf("the consumer's queue holds %v, want [waited-for]", got)
	}
	if got := testenv.MessageIDs(testenv.Drain(t, conn, top.DLQ)); !slices.Equal(got, []string{"waited-for-too", "hostile"}) {
		t.Errorf("the DLQ holds %v, want [waited-for-too hostile]", got)
	}
}

// An exhausted event's record passes only with every attempt made and the
// tiers' waits between its first and last failure.
func TestTriedTooLittle(t *testing.T) {
	tiers := []time.Duration{time.Second, 10 * time.Second, time.Minute, 2 * time.Minute} // 3m11s between attempts 1 and 5
	first := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, c := range []struct {
		attempts int
		span     time.Duration
		ok       bool
	}{
		{5, 3*time.Minute + 11*time.Second, true},
		{5, 3*time.Minute + 10*time.Second + 500*time.Millisecond, true},
		{5, 3 * time.Minute, false}, // the tiers did not wait
		{4, time.Hour, false},       // too few attempts
	} {
		got := triedTooLittle(dlq.Metadata{Attempts: c.attempts, FirstFailure: first, LastFailure: first.Add(c.span)}, 5, tiers)
		if (got == "") != c.ok {
			t.Errorf("%d attempts over %v: %q, want ok=%v", c.attempts, c.span, got, c.ok)
		}
	}
}
