package asyncapi_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/warrenmq/warren/contract"
	"github.com/warrenmq/warren/contract/asyncapi"
)

// A service's contracts and the consumers that read the stream become an
// AsyncAPI document, which CI writes and commits beside the contracts
// (`warren contracts asyncapi` does the same from a contracts directory).
func ExampleDocument() {
	type stateChanged struct {
		Name  string `json:"name"`
		State string `json:"state" jsonschema:"enum=todo,enum=doing,enum=done"`
	}
	type projectCreated struct {
		ID string `json:"id"`
	}
	contracts, err := contract.NewSet(
		contract.MustOf[stateChanged]("workitem.state.updated", "1.0"),
		contract.MustOf[projectCreated]("project.created", "1.0"),
	)
	if err != nil {
		panic(err)
	}
	doc, err := asyncapi.Document(contracts, asyncapi.Stream{
		Title: "Work items",
		Consumers: []asyncapi.Consumer{
			{Name: "webhook", Handles: []string{"workitem."}},
			{Name: "automation"},
		},
	})
	if err != nil {
		panic(err)
	}
	var d struct {
		Operations map[string]struct {
			Action   string
			Messages []struct {
				Ref string `json:"$ref"`
			}
		}
	}
	if err := json.Unmarshal(doc, &d); err != nil {
		panic(err)
	}
	for _, name := range slices.Sorted(maps.Keys(d.Operations)) {
		op := d.Operations[name]
		var msgs []string
		for _, m := range op.Messages {
			msgs = append(msgs, m.Ref[strings.LastIndex(m.Ref, "/")+1:])
		}
		fmt.Printf("%s %s: %s\n", op.Action, name, strings.Join(msgs, ", "))
	}
	// Output:
	// receive receive.automation: project.created.v1.0, workitem.state.updated.v1.0
	// receive receive.webhook: workitem.state.updated.v1.0
	// send send.warren.events: project.created.v1.0, workitem.state.updated.v1.0
}
