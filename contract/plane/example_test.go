package plane_test

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/contract"
	"github.com/warrenmq/warren/contract/plane"
)

// A consumer of Plane's stream checks each event against Plane's contracts
// and takes the data as a Go type: a work item whose state changed.
func ExampleContracts() {
	contracts, err := plane.Contracts()
	if err != nil {
		panic(err)
	}
	h := contract.Middleware(contracts.CheckKnown)(warren.Typed(func(_ context.Context, m *warren.Message, it plane.WorkItem) error {
		fmt.Printf("%s: %q is now in state %s\n", m.Event.Type, it.Name, *it.StateID)
		return nil
	}))
	data := json.RawMessage(`{"id":"55555555-0000-4000-8000-000000000001","name":"Fix the relay","priority":"high",
		"state_id":"44444444-0000-4000-8000-000000000002","type_id":null,"parent_id":null,"sequence_id":7,"sort_order":65535,
		"is_draft":false,"workspace_id":"11111111-1111-4111-8111-111111111111","project_id":"22222222-2222-4222-8222-222222222222",
		"assignee_ids":[],"label_ids":[],"created_at":"2026-12-01T10:00:00+00:00","updated_at":"2026-12-07T09:30:00.5+00:00","deleted_at":null}`)
	ev := warren.Event{ID: "e1", Type: "workitem.state.updated", Version: plane.Version, Payload: warren.Payload{Data: data}}
	if err := h.Handle(context.Background(), &warren.Message{Event: ev}); err != nil {
		panic(err)
	}
	// Output: workitem.state.updated: "Fix the relay" is now in state 44444444-0000-4000-8000-000000000002
}
