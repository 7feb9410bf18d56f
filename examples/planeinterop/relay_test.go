package planeinterop_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/consumer"
	"github.com/warrenmq/warren/examples/app"
	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/outbox"
	"github.com/warrenmq/warren/relay"
)

// declarePlaneQueues declares the exchange and the queues as Plane's
// consumers do (event_stream/consumer.py, automations/consumer.py): a
// durable fanout exchange; per queue a <queue>_dlq with a 7-day TTL, bound
// to nothing, and the queue with a 1-hour TTL and a dead-letter exchange
// (the webhook's and the automation's differ, as Plane's do), bound with
// its own name as the key (pika's default). All of it is deleted when t
// ends.
func declarePlaneQueues(t *testing.T, exchange, webhookQueue, automationQueue string) {
	t.Helper()
	ch := testenv.Channel(t)
	dlx := map[string]string{
		webhookQueue:    exchange + ".dlq",                               // Plane's plane.event_stream.dlq
		automationQueue: strings.ReplaceAll(exchange, ".", "_") + "_dlq", // Plane's plane_event_stream_dlq
	}
	testenv.CleanupQueues(t, webhookQueue+"_dlq", automationQueue+"_dlq")
	testenv.CleanupExchanges(t, dlx[automationQueue])
	if err := ch.ExchangeDeclare(exchange, amqp.ExchangeFanout, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	// Only the automation consumer declares its dead-letter exchange.
	if err := ch.ExchangeDeclare(dlx[automationQueue], amqp.ExchangeFanout, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	for queue, x := range dlx {
		if _, err := ch.QueueDeclare(queue+"_dlq", true, false, false, false, amqp.Table{"x-message-ttl": int32(604800000)}); err != nil {
			t.Fatal(err)
		}
		args := amqp.Table{"x-dead-letter-exchange": x, "x-dead-letter-routing-key": queue + "_dlq", "x-message-ttl": int32(3600000)}
		if _, err := ch.QueueDeclare(queue, true, false, false, false, args); err != nil {
			t.Fatal(err)
		}
		if err := ch.QueueBind(queue, queue, exchange, false, nil); err != nil {
			t.Fatal(err)
		}
	}
}

// TestExamplesHandleWhatWarrensRelayPublishes is step 1 and 2 of
// docs/plane.md together: Plane's triggers' rows (their payloads built in
// PostgreSQL from the triggers' own expressions) in Plane's outbox table,
// warren's relay publishing them in Plane's format with Plane's
// properties, and the webhook and automation examples adopting queues
// declared as Plane's consumers declare theirs. Every event is handled or
// skipped as Plane's consumers decide; none is dead-lettered for its shape.
func TestExamplesHandleWhatWarrensRelayPublishes(t *testing.T) {
	e := startExamplesOn(t, true)
	ctx := context.Background()
	plane := testenv.NewPlaneTable(t, true)

	type sent struct {
		planeCase
		itemID, eventID string
	}
	var all []sent
	for _, c := range planeCases() {
		if c.dead {
			continue // Plane's table holds no event without an event_id
		}
		itemID := app.NewID()
		if err := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error { return e.createItem(ctx, tx, c, itemID) }); err != nil {
			t.Fatal(err)
		}
		ev := c.event(t, itemID)
		all = append(all, sent{c, itemID, ev["event_id"].(string)})
		plane.Exec(`INSERT INTO {table} (event_id, event_type, entity_type, entity_id, payload, workspace_id, project_id, initiator_id, initiator_type)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
			ev["event_id"], ev["event_type"], ev["entity_type"], ev["entity_id"], ev["payload"], ev["workspace_id"], ev["project_id"], ev["initiator_id"], ev["initiator_type"])
	}

	r, err := relay.New(relay.Config{
		DatabaseURL: testenv.DatabaseURL(t), AMQPURL: e.cfg.AMQPURL, Exchange: e.cfg.Names.Exchange,
		Table: plane.Name, Schema: outbox.SchemaPlane, Format: warren.FormatPlane, PlaneProperties: true,
		Name: testenv.Name(t, "relay"),
	})
	if err != nil {
		t.Fatal(err)
	}
	testenv.RunInBackground(t, r.Run)

	var wantRuleRuns uint64
	for _, s := range all {
		wantRuleRuns += uint64(s.ruleRuns)
	}
	testenv.WaitFor(t, 60*time.Second, "every event settled by both consumers", func() bool {
		h, a := e.hook.Stats(), e.auto.Stats()
		return h.Done+h.DeadLettered >= uint64(len(all)) && a.Done+a.Skipped+a.DeadLettered >= uint64(len(all))
	})
	// The relay marks a row after the broker's confirm, which may come
	// after the consumers have acked its message.
	testenv.WaitFor(t, 30*time.Second, "every row of Plane's table processed", func() bool { return plane.Count(`processed_at IS NULL`) == 0 })
	if got, want := settled(e.hook.Stats()), (consumer.Stats{Received: uint64(len(all)), Done: uint64(len(all))}); got != want {
		t.Errorf("webhook stats\n %+v\nwant every event delivered, none dead\n %+v", got, want)
	}
	if got, want := settled(e.auto.Stats()), (consumer.Stats{Received: uint64(len(all)), Done: wantRuleRuns, Skipped: uint64(len(all)) - wantRuleRuns}); got != want {
		t.Errorf("automation stats\n %+v\nwant the rule on users' state changes, the rest skipped, none dead\n %+v", got, want)
	}
	byEvent, _, err := e.auto.Runs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, accepted, _ := e.recv.snapshot()
	for _, s := range all {
		if byEvent[s.eventID] != s.ruleRuns {
			t.Errorf("%s: the rule ran %d times, want %d", s.name, byEvent[s.eventID], s.ruleRuns)
		}
		if len(accepted[s.eventID]) != 1 {
			t.Errorf("%s: the webhook delivered it %d times, want once", s.name, len(accepted[s.eventID]))
		}
	}
}
