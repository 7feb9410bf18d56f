package main

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/consumer"
	"github.com/warrenmq/warren/contract"
	"github.com/warrenmq/warren/outbox"
)

// sampleData is what a typed handler of sampleEvent takes: its
// payload.data, {"state":"done","priority":"high"}.
type sampleData struct {
	State    string `json:"state" jsonschema:"enum=todo,enum=doing,enum=done"`
	Priority string `json:"priority" jsonschema:"enum=urgent,enum=high,enum=medium,enum=low,enum=none"`
}

// sampleContracts are the contracts of sampleEvent's type and version.
func sampleContracts() (*contract.Set, error) {
	ev := sampleEvent(0)
	c, err := contract.Of[sampleData](ev.Type, ev.Version)
	if err != nil {
		return nil, err
	}
	return contract.NewSet(c)
}

// contractsConsumeScenario is the cost of typed handlers and contracts to
// a consumer (issue 36): the same drain as the consume scenario, its
// handler taking the data as a Go type, behind the contract check.
func contractsConsumeScenario() scenario {
	return scenario{
		name: "consume, typed and checked against a contract",
		about: fmt.Sprintf("The consume scenario's drain (prefetch %d, %d workers) with a handler that takes the event's payload.data as "+
			"a Go struct (`warren.Typed`), alone and behind `contract.Middleware`, which checks the data against its JSON Schema "+
			"(santhosh-tekuri/jsonschema) first. The baseline here is warren's own consumer at its defaults with a handler that "+
			"takes the *warren.Message (the envelope is decoded, the data is not): the ratio is what typing and checking cost. "+
			"The target is at least 0.9× of it.", prefetch, workers),
		metrics: []metric{{name: throughput.name, target: target{ratio: 0.9}}},
		variants: []variant{
			{name: "baseline: warren BaseConsumer defaults, untyped handler", baseline: true, run: warrenConsume(nil)},
			{name: "warren: warren.Typed handler", run: warrenConsumeWith(nil, typedHandler(false))},
			{name: "warren: warren.Typed handler behind contract.Middleware", run: warrenConsumeWith(nil, typedHandler(true)),
				why: "each event's data is decoded a second time, into the schema validator's values, and checked; on two cores shared " +
					"with the broker that CPU comes out of the drain."},
		},
	}
}

// typedHandler installs what a typed handler adds to the bench's no-op
// handler: the data decoded into a sampleData, and with checked its
// contract checked before that.
func typedHandler(checked bool) warrenSetup {
	return func(ctx context.Context, e *env, c *consumer.BaseConsumer) (func(), error) {
		if checked {
			set, err := sampleContracts()
			if err != nil {
				return nil, err
			}
			c.Use(contract.Middleware(set.Check))
		}
		c.Use(func(next warren.Handler) warren.Handler {
			return warren.Typed(func(ctx context.Context, m *warren.Message, d sampleData) error {
				if d.State == "" {
					return warren.Permanent(fmt.Errorf("decoded no state"))
				}
				return next.Handle(ctx, m)
			})
		})
		return func() {}, nil
	}
}

// contractsPublishScenario is the producer's cost of checking each event
// against its contract before it commits (outbox.Options.Check).
func contractsPublishScenario() scenario {
	return scenario{
		name: "publish, checked against a contract",
		about: fmt.Sprintf("%d producers commit -messages/4 events through `outbox.Publish`, one event per transaction, as fast as they can; "+
			"the outbox checks each event against its contract first (`outbox.Options{Check: set.Check}`) or does not. "+
			"The baseline is the unchecked outbox: the ratio is what the check costs a producer, whose transaction's commit "+
			"(a WAL flush) is most of an event's time.", producers),
		metrics: []metric{{name: "events/s", target: target{ratio: 0.9}}},
		size:    func(e *env) string { return fmt.Sprintf("%d events", e.messages/4) },
		variants: []variant{
			{name: "baseline: outbox.Publish, unchecked", baseline: true, run: publishThrough(false)},
			{name: "warren: outbox.Publish with Options.Check", run: publishThrough(true)},
		},
	}
}

// publishThrough commits e.messages/4 events, one per transaction, from
// producers goroutines, and returns the rate.
func publishThrough(checked bool) func(ctx context.Context, e *env) (figures, error) {
	return func(ctx context.Context, e *env) (figures, error) {
		var opts outbox.Options
		if checked {
			set, err := sampleContracts()
			if err != nil {
				return nil, err
			}
			opts.Check = set.Check
		}
		ob, err := latencyOutbox(ctx, e, opts)
		if err != nil {
			return nil, err
		}
		defer ob.close()
		total := e.messages / 4
		rate, err := produce(ctx, ob, 0, total, make([]atomic.Int64, total))
		return figures{rate}, err
	}
}
