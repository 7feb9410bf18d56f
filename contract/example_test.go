package contract_test

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/contract"
)

// A service derives its contracts from the types its handlers take, checks
// events against them, and writes them to its repository (WriteDir) for
// `warren contracts check` to guard in CI.
func ExampleOf() {
	type stateChanged struct {
		Name  string `json:"name"`
		State string `json:"state" jsonschema:"enum=todo,enum=doing,enum=done"`
	}
	contracts, err := contract.NewSet(contract.MustOf[stateChanged]("workitem.state.updated", "1.0"))
	if err != nil {
		panic(err)
	}
	ev := warren.Event{ID: "e1", Type: "workitem.state.updated", Version: "1.0",
		Payload: warren.Payload{Data: json.RawMessage(`{"name":"Fix the relay","state":"blocked"}`)}}
	fmt.Println(contracts.Check(ev))
	// Output: contract workitem.state.updated@1.0: payload.data.state: not one of the values the contract allows, ["todo","doing","done"]
}

// A consumer that reads version 2.0 of an event declares how 1.0 reaches
// it; its handler only ever sees 2.0.
func ExampleSet_Reader() {
	type item struct {
		Title string `json:"title"`
	}
	contracts, err := contract.NewSet(contract.MustOf[item]("item.updated", "2.0"))
	if err != nil {
		panic(err)
	}
	read, err := contracts.Reader(contract.Reads{Type: "item.updated", Version: "2.0", Upcasts: []contract.Upcast{{
		From: "1.0", To: "2.0",
		Func: func(data json.RawMessage) (json.RawMessage, error) {
			var v1 struct {
				Name string `json:"name"`
			}
			if err := json.Unmarshal(data, &v1); err != nil {
				return nil, err
			}
			return json.Marshal(item{Title: v1.Name})
		},
	}}})
	if err != nil {
		panic(err)
	}
	h := read(warren.Typed(func(_ context.Context, m *warren.Message, it item) error {
		fmt.Printf("%s %q\n", m.Event.Version, it.Title)
		return nil
	}))
	old := warren.Event{ID: "e1", Type: "item.updated", Version: "1.0", Payload: warren.Payload{Data: json.RawMessage(`{"name":"Fix the relay"}`)}}
	if err := h.Handle(context.Background(), &warren.Message{Event: old}); err != nil {
		panic(err)
	}
	// Output: 2.0 "Fix the relay"
}
