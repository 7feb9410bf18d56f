package cloudevents_test

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/cloudevents"
	"github.com/warrenmq/warren/consumer"
	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/relay"
)

// A relay that publishes CloudEvents, in either content mode, and a
// consumer at its defaults: every event reaches a typed handler as the
// producer committed it, and nothing is dead-lettered.
func TestRelayToConsumerAsCloudEvents(t *testing.T) {
	t.Parallel()
	for _, mode := range []cloudevents.Mode{cloudevents.Binary, cloudevents.Structured} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			ob := testenv.NewOutboxTable(t)
			exchange, name := testenv.Name(t, "ex"), testenv.Name(t, "ce")
			testenv.CleanupExchanges(t, exchange, name+".dlx")
			c, err := consumer.New(consumer.Config{URL: testenv.AMQPURL(t), Name: name, Exchange: exchange})
			if err != nil {
				t.Fatal(err)
			}
			testenv.CleanupQueues(t, c.Topology().Queues()...)
			got := make(chan warren.Event, 16)
			c.Handle("workitem.", warren.Typed(func(_ context.Context, m *warren.Message, d struct {
				State string `json:"state"`
			}) error {
				if d.State == "" {
					return warren.Permanent(errNoState)
				}
				got <- m.Event
				return nil
			}))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 2)
			go func() { done <- c.Run(ctx) }()
			testenv.WaitFor(t, 60*time.Second, "the consumer to be ready", func() bool { return c.Health().Ready })
			r, err := relay.New(relay.Config{Pool: ob.Pool, Table: ob.Table.Name(), AMQPURL: testenv.AMQPURL(t), Exchange: exchange,
				CloudEvents: &cloudevents.Encoder{Source: "/orders", Mode: mode}})
			if err != nil {
				t.Fatal(err)
			}
			go func() { done <- r.Run(ctx) }()

			created := time.Date(2026, 12, 7, 9, 30, 0, 123456000, time.UTC)
			want := []warren.Event{
				{ID: "ce-1", Type: "workitem.created", EntityType: "issue", EntityID: "i-1", WorkspaceID: "w-1", ProjectID: "p-1",
					InitiatorID: "u-1", InitiatorType: "USER", Version: "1.0", CreatedAt: created,
					Payload: warren.Payload{Data: json.RawMessage(`{"state":"todo","n":1}`)}},
				{ID: "ce-2", Type: "workitem.updated", EntityType: "issue", EntityID: "i-1", WorkspaceID: "w-1", CreatedAt: created,
					Payload: warren.Payload{Data: json.RawMessage(`{"state":"done"}`), PreviousAttributes: json.RawMessage(`{"state":"todo"}`)}},
				{ID: "ce-3", Type: "workitem.state.updated", EntityType: "issue", EntityID: "i-2", InitiatorType: "SYSTEM.AUTOMATION", CreatedAt: created,
					Payload: warren.Payload{Data: json.RawMessage(`{"state":"doing"}`)}},
			}
			ob.Publish(want...)
			byID := map[string]warren.Event{}
			for len(byID) < len(want) {
				select {
				case ev := <-got:
					byID[ev.ID] = ev
				case err := <-done:
					t.Fatalf("stopped: %v", err)
				case <-time.After(60 * time.Second):
					t.Fatalf("%d of %d events reached the handler in 60s", len(byID), len(want))
				}
			}
			for _, w := range want {
				g := byID[w.ID]
				if !g.CreatedAt.Equal(w.CreatedAt) || !jsonEqual(t, g.Payload.Data, w.Payload.Data) || !jsonEqual(t, g.Payload.PreviousAttributes, w.Payload.PreviousAttributes) {
					t.Errorf("%s: got %+v, want %+v", w.ID, g, w)
				}
				g.CreatedAt, g.Payload, g.Extra = w.CreatedAt, w.Payload, nil
				if !reflect.DeepEqual(g, w) {
					t.Errorf("%s: the handler saw\n %+v\nwant\n %+v", w.ID, g, w)
				}
			}
			if s := c.Stats(); s.DeadLettered != 0 {
				t.Errorf("%d dead-lettered, want none", s.DeadLettered)
			}
		})
	}
}

var errNoState = errorString("the data decoded without its state")

type errorString string

func (e errorString) Error() string { return string(e) }

// jsonEqual compares two JSON values as values; none and null are equal,
// as the outbox's column makes them.
func jsonEqual(t *testing.T, a, b json.RawMessage) bool {
	t.Helper()
	if len(a) == 0 {
		a = json.RawMessage("null")
	}
	if len(b) == 0 {
		b = json.RawMessage("null")
	}
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatal(err)
	}
	return reflect.DeepEqual(x, y)
}
