package warren_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/dlq"
)

type workItem struct {
	Name     string `json:"name"`
	Priority string `json:"priority"`
	State    struct {
		ID    string `json:"id"`
		Order int    `json:"order"`
	} `json:"state"`
	AssigneeIDs []string `json:"assignee_ids"`
}

func message(data string) *warren.Message {
	return &warren.Message{Event: warren.Event{ID: "e1", Type: "workitem.updated", Payload: warren.Payload{Data: []byte(data)}}}
}

// Typed hands the handler data decoded as a T, Plane's text forms
// included, and never a half-filled one: data of another shape is an
// Undecodable permanent failure whose DataError names the field.
func TestTyped(t *testing.T) {
	var got []workItem
	h := warren.Typed(func(_ context.Context, _ *warren.Message, w workItem) error {
		got = append(got, w)
		return nil
	})
	ctx := context.Background()
	if err := h.Handle(ctx, message(`{"name": "Fix", "priority": "high", "state": {"id": "s1", "order": 2}, "assignee_ids": ["a"], "unknown": 1}`)); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Name != "Fix" || got[0].State.Order != 2 || len(got[0].AssigneeIDs) != 1 {
		t.Fatalf("the handler got %+v", got)
	}
	for data, path := range map[string]string{
		`{"name": 42}`:                          "payload.data.name",
		`{"state": {"id": "s1", "order": "x"}}`: "payload.data.state.order",
		`{"assignee_ids": "a"}`:                 "payload.data.assignee_ids",
		`[1, 2]`:                                "payload.data",
		`"{}"`:                                  "", // Plane's "{}": an empty object, no error
		`null`:                                  "payload.data",
	} {
		err := h.Handle(ctx, message(data))
		if path == "" {
			if err != nil {
				t.Errorf("%s: %v, want none", data, err)
			}
			continue
		}
		var de *warren.DataError
		switch {
		case !errors.As(err, &de) || de.Path != path:
			t.Errorf("%s: %v (path %q), want a DataError at %s", data, err, pathOf(de), path)
		case !errors.Is(err, warren.ErrUndecodable) || !errors.Is(err, warren.ErrPermanent) || !errors.Is(err, warren.ErrInvalidEvent):
			t.Errorf("%s: %v does not match ErrUndecodable, ErrPermanent and ErrInvalidEvent", data, err)
		}
		if o, _ := warren.Classify(err); o != warren.OutcomePermanent {
			t.Errorf("%s: outcome %v, want permanent", data, o)
		}
	}
	if len(got) != 2 {
		t.Errorf("the handler ran %d times, want 2: never for data that did not decode", len(got))
	}
	// A pointer T never reaches the handler nil: null data is undecodable.
	ptr := warren.Typed(func(_ context.Context, _ *warren.Message, w *workItem) error {
		_ = w.Name
		return nil
	})
	if err := ptr.Handle(ctx, message(`null`)); !errors.Is(err, warren.ErrUndecodable) {
		t.Errorf("a pointer T and null data: %v, want undecodable", err)
	}
	if warren.Undecodable(nil) != nil {
		t.Error("Undecodable(nil) is not nil")
	}
}

func pathOf(de *warren.DataError) string {
	if de == nil {
		return ""
	}
	return de.Path
}

func ExampleTyped() {
	type issue struct {
		Name        string   `json:"name"`
		AssigneeIDs []string `json:"assignee_ids"`
	}
	h := warren.Typed(func(_ context.Context, m *warren.Message, data issue) error {
		fmt.Printf("%s: %q, %d assignee(s)\n", m.Event.Type, data.Name, len(data.AssigneeIDs))
		return nil
	})
	ctx := context.Background()
	_ = h.Handle(ctx, message(`{"name": "Fix the relay", "assignee_ids": ["u1"]}`))
	err := h.Handle(ctx, message(`{"name": ["not", "a", "name"]}`))
	var de *warren.DataError
	fmt.Println(errors.Is(err, warren.ErrUndecodable), errors.As(err, &de) && de.Path == "payload.data.name")
	// Output:
	// workitem.updated: "Fix the relay", 1 assignee(s)
	// true true
}

// `warren dlq stats` groups dead letters by class and error text with a
// message's particulars taken out (dlq.Signature): the contract failures
// of one field fall in one group whatever the values, and two fields'
// failures in two.
func TestTypedFailuresGroupByField(t *testing.T) {
	h := warren.Typed(func(context.Context, *warren.Message, workItem) error { return nil })
	signature := func(data string) string {
		t.Helper()
		err := h.Handle(context.Background(), message(data))
		if err == nil {
			t.Fatalf("%s decoded", data)
		}
		return dlq.Signature(dlq.ClassUndecodable, err.Error())
	}
	name1, name2 := signature(`{"name": 42}`), signature(`{"name": 7, "priority": "low"}`)
	order := signature(`{"state": {"order": "first"}}`)
	if name1 != name2 || name1 == order {
		t.Errorf("signatures: %q and %q for the name, %q for state.order; want one group per field", name1, name2, order)
	}
	if !strings.Contains(name1, "name") || !strings.Contains(order, "order") {
		t.Errorf("signatures %q and %q do not name their fields", name1, order)
	}
}

// PayloadOf builds a payload from Go values that a Typed handler reads
// back as they were, and refuses values that are not JSON objects.
func TestPayloadOf(t *testing.T) {
	in := workItem{Name: "Fix the relay", Priority: "high"}
	p, err := warren.PayloadOf(in, map[string]string{"priority": "low"})
	if err != nil {
		t.Fatal(err)
	}
	var out workItem
	if err := p.DecodeData(&out); err != nil || out.Name != in.Name || out.Priority != in.Priority {
		t.Fatalf("read back %+v, %v", out, err)
	}
	if string(p.PreviousAttributes) != `{"priority":"low"}` {
		t.Errorf("previous attributes %s", p.PreviousAttributes)
	}
	var none map[string]any
	for _, prev := range []any{nil, none, (*workItem)(nil)} {
		if p, err := warren.PayloadOf(in, prev); err != nil || p.PreviousAttributes != nil {
			t.Errorf("previous attributes %#v: %s, %v; want none", prev, p.PreviousAttributes, err)
		}
	}
	for name, v := range map[string]any{"a string": "x", "a list": []int{1}, "nil": nil, "a channel": make(chan int)} {
		if _, err := warren.PayloadOf(v, nil); !errors.Is(err, warren.ErrInvalidEvent) || !strings.Contains(err.Error(), "payload.data") {
			t.Errorf("%s: %v", name, err)
		}
	}
}
