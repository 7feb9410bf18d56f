package consumer

import (
	"context"
	"errors"
	"testing"

	"github.com/warrenmq/warren"
)

func TestRouterLongestPrefixWins(t *testing.T) {
	t.Parallel()
	var r router
	named := func(name string) warren.Handler {
		return warren.HandlerFunc(func(context.Context, *warren.Message) error { return errors.New(name) })
	}
	for _, p := range []string{"workitem.", "workitem.comment.", "", "label."} {
		if err := r.add(p, named("h:"+p)); err != nil {
			t.Fatal(err)
		}
	}
	cases := map[string]string{
		"workitem.updated":         "h:workitem.",
		"workitem.comment.created": "h:workitem.comment.",
		"label.deleted":            "h:label.",
		"state.created":            "h:",
	}
	for typ, want := range cases {
		err := r.Handle(context.Background(), &warren.Message{Event: warren.Event{Type: typ}})
		if err == nil || err.Error() != want {
			t.Errorf("%s went to %v, want %s", typ, err, want)
		}
	}
	if err := r.add("label.", named("again")); err == nil {
		t.Error("registering a prefix twice was accepted")
	}
}

func TestRouterUnhandledPolicy(t *testing.T) {
	t.Parallel()
	m := &warren.Message{Event: warren.Event{Type: "cycle.created"}}
	ack := router{unhandled: AckUnhandled}
	if out, _ := warren.Classify(ack.Handle(context.Background(), m)); out != warren.OutcomeSkipped {
		t.Errorf("AckUnhandled gave %v", out)
	}
	dead := router{unhandled: DeadLetterUnhandled}
	err := dead.Handle(context.Background(), m)
	var ue *UnhandledError
	if out, _ := warren.Classify(err); out != warren.OutcomePermanent || !errors.As(err, &ue) || ue.EventType != "cycle.created" {
		t.Errorf("DeadLetterUnhandled gave %v (%v)", out, err)
	}
}
