package middleware_test

import (
	"context"
	"testing"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/middleware"
)

var reached = warren.HandlerFunc(func(context.Context, *warren.Message) error { return nil })

func classify(t *testing.T, mw warren.Middleware, m *warren.Message) warren.Outcome {
	t.Helper()
	err := mw(reached).Handle(context.Background(), m)
	outcome, _ := warren.Classify(err)
	if outcome == warren.OutcomeSkipped && err.Error() == "skipped: " {
		t.Errorf("skip without a reason")
	}
	return outcome
}

func TestPrefixFilter(t *testing.T) {
	filter := middleware.PrefixFilter("workitem.", "issue.")
	for _, tc := range []struct {
		eventType string
		want      warren.Outcome
	}{
		{"workitem.updated", warren.OutcomeDone},
		{"workitem.", warren.OutcomeDone},
		{"issue.created", warren.OutcomeDone},
		{"project.created", warren.OutcomeSkipped},
		{"workitem", warren.OutcomeSkipped}, // the prefix includes the dot
		{"Workitem.updated", warren.OutcomeSkipped},
		{"", warren.OutcomeSkipped},
	} {
		if got := classify(t, filter, &warren.Message{Event: warren.Event{Type: tc.eventType}}); got != tc.want {
			t.Errorf("event type %q: %v, want %v", tc.eventType, got, tc.want)
		}
	}
}

func TestSkipInitiators(t *testing.T) {
	missing, err := warren.DecodeEvent([]byte(`{"event_id":"e","event_type":"workitem.updated"}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		filter   warren.Middleware
		event    warren.Event
		want     warren.Outcome
		reasonOK bool
	}{
		{"import by default", middleware.SkipInitiators(), warren.Event{InitiatorType: "SYSTEM.IMPORT"}, warren.OutcomeSkipped, true},
		{"automation by default", middleware.SkipInitiators(), warren.Event{InitiatorType: "SYSTEM.AUTOMATION"}, warren.OutcomeSkipped, true},
		{"user by default", middleware.SkipInitiators(), warren.Event{InitiatorType: "USER"}, warren.OutcomeDone, true},
		{"empty initiator", middleware.SkipInitiators(), warren.Event{InitiatorType: ""}, warren.OutcomeDone, true},
		{"missing initiator", middleware.SkipInitiators(), missing, warren.OutcomeDone, true},
		{"lower case is not SYSTEM.", middleware.SkipInitiators(), warren.Event{InitiatorType: "system.import"}, warren.OutcomeDone, true},
		{"SYSTEM without the dot", middleware.SkipInitiators(), warren.Event{InitiatorType: "SYSTEMATIC"}, warren.OutcomeDone, true},
		{"only imports: import", middleware.SkipInitiators("SYSTEM.IMPORT"), warren.Event{InitiatorType: "SYSTEM.IMPORT"}, warren.OutcomeSkipped, true},
		{"only imports: automation", middleware.SkipInitiators("SYSTEM.IMPORT"), warren.Event{InitiatorType: "SYSTEM.AUTOMATION"}, warren.OutcomeDone, true},
		{"several: bot", middleware.SkipInitiators("SYSTEM.", "BOT"), warren.Event{InitiatorType: "BOT"}, warren.OutcomeSkipped, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := classify(t, tc.filter, &warren.Message{Event: tc.event}); got != tc.want {
				t.Errorf("initiator %q: %v, want %v", tc.event.InitiatorType, got, tc.want)
			}
		})
	}
}

func TestSkipReasonNamesTheMatch(t *testing.T) {
	err := middleware.SkipInitiators()(reached).Handle(context.Background(), &warren.Message{Event: warren.Event{InitiatorType: "SYSTEM.IMPORT"}})
	if want := `skipped: initiator type "SYSTEM.IMPORT" starts with "SYSTEM."`; err == nil || err.Error() != want {
		t.Errorf("reason = %v, want %q", err, want)
	}
	err = middleware.PrefixFilter("workitem.")(reached).Handle(context.Background(), &warren.Message{Event: warren.Event{Type: "cycle.created"}})
	if want := `skipped: event type "cycle.created" matches none of ["workitem."]`; err == nil || err.Error() != want {
		t.Errorf("reason = %v, want %q", err, want)
	}
}

func TestFiltersRejectEmptyPrefixes(t *testing.T) {
	mustPanic(t, "PrefixFilter needs at least one prefix", func() { middleware.PrefixFilter() })
	mustPanic(t, "PrefixFilter: prefix 2 of 2 is empty", func() { middleware.PrefixFilter("workitem.", "") })
	mustPanic(t, "SkipInitiators: prefix 1 of 1 is empty", func() { middleware.SkipInitiators("") })
}
