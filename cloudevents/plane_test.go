package cloudevents_test

import (
	"context"
	"testing"
	"time"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/cloudevents"
	"github.com/warrenmq/warren/consumer"
	"github.com/warrenmq/warren/contract"
	"github.com/warrenmq/warren/contract/plane"
	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/outbox"
	"github.com/warrenmq/warren/relay"
)

// Plane's own outbox table relayed as CloudEvents: a Plane row has no
// version, and the CloudEvent carries the one Plane's envelope would have
// (1.0), so contract/plane's contracts apply to it as to Plane's envelope:
// data that breaks workitem.updated@1.0 is dead-lettered, never handed to
// the handler. Without it the version was "" and CheckKnown let the data
// through unchecked.
func TestPlaneRowsAsCloudEventsKeepTheirContracts(t *testing.T) {
	for _, ce := range []bool{false, true} {
		t.Run(map[bool]string{false: "format plane", true: "cloudevents binary"}[ce], func(t *testing.T) { planeRowsThroughContracts(t, ce) })
	}
}

func planeRowsThroughContracts(t *testing.T, ce bool) {
	p := testenv.NewPlaneTable(t, true)
	if _, err := p.Outbox(outbox.Options{}).Migrate(context.Background(), p.Pool); err != nil {
		t.Fatal(err)
	}
	exchange, name := testenv.Name(t, "ex"), testenv.Name(t, "ce")
	testenv.CleanupExchanges(t, exchange, name+".dlx")
	c, err := consumer.New(consumer.Config{URL: testenv.AMQPURL(t), Name: name, Exchange: exchange})
	if err != nil {
		t.Fatal(err)
	}
	testenv.CleanupQueues(t, c.Topology().Queues()...)
	contracts, err := plane.Contracts()
	if err != nil {
		t.Fatal(err)
	}
	c.Use(contract.Middleware(contracts.CheckKnown))
	got := make(chan warren.Event, 4)
	c.HandleFunc("workitem.", func(_ context.Context, m *warren.Message) error { got <- m.Event; return nil })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 2)
	go func() { done <- c.Run(ctx) }()
	testenv.WaitFor(t, 60*time.Second, "the consumer to be ready", func() bool { return c.Health().Ready })
	rcfg := relay.Config{Pool: p.Pool, Table: p.Name, Schema: outbox.SchemaPlane, AMQPURL: testenv.AMQPURL(t), Exchange: exchange, Format: warren.FormatPlane}
	if ce {
		rcfg.Format, rcfg.CloudEvents = "", &cloudevents.Encoder{Source: "/plane", Mode: cloudevents.Binary}
	}
	r, err := relay.New(rcfg)
	if err != nil {
		t.Fatalf("the relay refuses Plane's table as CloudEvents: %v", err)
	}
	go func() { done <- r.Run(ctx) }()
	// workitem.updated whose data is {"name":"x"}: no id, no priority, …
	bad := warren.Event{Type: "workitem.updated", Version: plane.Version, Payload: warren.Payload{Data: []byte(`{"name":"x"}`)}}
	if contracts.Check(bad) == nil {
		t.Fatal("the fixture's data does not break the workitem contract")
	}
	p.InsertData(1, `{"name":"x"}`)
	testenv.WaitFor(t, 60*time.Second, "the row to be dead-lettered", func() bool { return c.Stats().DeadLettered == 1 })
	select {
	case ev := <-got:
		t.Errorf("data that breaks workitem.updated@1.0 reached the handler unchecked: version %q, data %s", ev.Version, ev.Payload.Data)
	default:
	}
}
