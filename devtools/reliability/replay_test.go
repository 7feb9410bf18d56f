package main

import (
	"context"
	"slices"
	"testing"

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
	n, err := replayExhausted(context.Background(), testenv.AMQPURL(t), []string{top.Consumer}, []string{"waited-for", "waited-for-too", "never-dead"})
	if err != nil {
		t.Fatal(err)
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
