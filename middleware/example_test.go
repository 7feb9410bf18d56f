package middleware_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"os"
	"time"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/dedup/memory"
	"github.com/warrenmq/warren/middleware"
)

// The stock middleware in the recommended order, around a handler. Every
// delivery's outcome comes back as an error warren.Classify understands.
func ExampleChain() {
	store, err := memory.New(memory.Config{}) // dedup/postgres or dedup/redis in a service with replicas
	if err != nil {
		log.Fatal(err)
	}
	handler := middleware.Chain(
		middleware.Recover(),
		middleware.PrefixFilter("workitem."),
		middleware.SkipInitiators(),
		middleware.Dedup(store, middleware.DedupOptions{}),
		middleware.Timeout(30*time.Second),
	)(warren.HandlerFunc(func(ctx context.Context, m *warren.Message) error {
		fmt.Println("handling", m.Event.ID)
		return nil
	}))

	deliveries := []warren.Event{
		{ID: "1", Type: "workitem.updated", InitiatorType: "USER"},
		{ID: "1", Type: "workitem.updated", InitiatorType: "USER"}, // redelivered
		{ID: "2", Type: "cycle.created", InitiatorType: "USER"},
		{ID: "3", Type: "workitem.created", InitiatorType: "SYSTEM.AUTOMATION"},
	}
	for _, ev := range deliveries {
		err := handler.Handle(context.Background(), &warren.Message{Event: ev, Consumer: "webhook", Attempt: 1})
		outcome, _ := warren.Classify(err)
		fmt.Println(ev.ID, outcome)
	}
	// Output:
	// handling 1
	// 1 done
	// 1 duplicate
	// 2 skipped
	// 3 skipped
}

func ExamplePrefixFilter() {
	handler := middleware.PrefixFilter("workitem.", "issue.")(warren.HandlerFunc(func(context.Context, *warren.Message) error { return nil }))
	for _, eventType := range []string{"workitem.updated", "cycle.created"} {
		err := handler.Handle(context.Background(), &warren.Message{Event: warren.Event{Type: eventType}})
		outcome, _ := warren.Classify(err)
		fmt.Println(eventType, outcome, err)
	}
	// Output:
	// workitem.updated done <nil>
	// cycle.created skipped skipped: event type "cycle.created" matches none of ["workitem." "issue."]
}

func ExampleSkipInitiators() {
	handler := middleware.SkipInitiators()(warren.HandlerFunc(func(context.Context, *warren.Message) error { return nil }))
	for _, initiator := range []string{"USER", "SYSTEM.IMPORT", ""} {
		err := handler.Handle(context.Background(), &warren.Message{Event: warren.Event{InitiatorType: initiator}})
		outcome, _ := warren.Classify(err)
		fmt.Printf("%q: %v\n", initiator, outcome)
	}
	// Output:
	// "USER": done
	// "SYSTEM.IMPORT": skipped
	// "": done
}

func ExampleTimeout() {
	slow := warren.HandlerFunc(func(ctx context.Context, _ *warren.Message) error {
		<-ctx.Done() // a handler that honours its context
		return ctx.Err()
	})
	err := middleware.Timeout(10*time.Millisecond)(slow).Handle(context.Background(), &warren.Message{})
	outcome, _ := warren.Classify(err)
	fmt.Println(outcome, errors.Is(err, middleware.ErrTimeout))
	fmt.Println(err)
	// Output:
	// retry true
	// handler timed out after 10ms: context deadline exceeded
}

func ExampleRecover() {
	buggy := warren.HandlerFunc(func(_ context.Context, m *warren.Message) error {
		first := m.Event.Payload.Data[0] // panics on an event without payload data
		_ = first
		return nil
	})
	err := middleware.Recover()(buggy).Handle(context.Background(), &warren.Message{})
	var pe *middleware.PanicError
	outcome, _ := warren.Classify(err)
	fmt.Println(outcome, errors.As(err, &pe), len(pe.Stack) > 0)
	fmt.Println(err)
	// Output:
	// retry true true
	// panic: runtime error: index out of range [0] with length 0
}

func ExampleLogging() {
	// Time and duration are dropped here only to make the output stable.
	logger := slog.New(slog.NewJSONHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey || a.Key == "duration" {
				return slog.Attr{}
			}
			return a
		},
	}))
	handler := middleware.Logging(logger, middleware.LoggingOptions{})(warren.HandlerFunc(func(context.Context, *warren.Message) error {
		return errors.New("webhook endpoint returned 503")
	}))
	_ = handler.Handle(context.Background(), &warren.Message{
		Event:    warren.Event{ID: "evt-1", Type: "workitem.updated"},
		Consumer: "webhook", Attempt: 5, MaxAttempts: 5,
	})
	// Output:
	// {"level":"ERROR","msg":"event failed, attempts exhausted, will be dead-lettered","event_id":"evt-1","event_type":"workitem.updated","consumer":"webhook","attempt":5,"max_attempts":5,"outcome":"retry","exhausted":true,"error":"webhook endpoint returned 503"}
}

// Dedup with a handler that fails once: the failure frees the event's key,
// so the retry runs the handler, and a later redelivery is a duplicate.
func ExampleDedup() {
	store, err := memory.New(memory.Config{})
	if err != nil {
		log.Fatal(err)
	}
	handler := middleware.Dedup(store, middleware.DedupOptions{})(warren.HandlerFunc(func(_ context.Context, m *warren.Message) error {
		if m.Attempt == 1 {
			return errors.New("downstream unavailable")
		}
		return nil
	}))
	for attempt := 1; attempt <= 3; attempt++ {
		m := &warren.Message{Event: warren.Event{ID: "evt-1"}, Consumer: "automation", Attempt: attempt}
		outcome, _ := warren.Classify(handler.Handle(context.Background(), m))
		fmt.Println("attempt", attempt, outcome)
	}
	// Output:
	// attempt 1 retry
	// attempt 2 done
	// attempt 3 duplicate
}
