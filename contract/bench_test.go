package contract_test

import (
	"encoding/json"
	"testing"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/contract"
)

// The CPU one check costs a producer (outbox.Options.Check) or a consumer
// (Middleware), on the bench's Plane-shaped event: devtools/bench's
// contracts scenarios give what it costs in throughput.
func BenchmarkCheck(b *testing.B) {
	type data struct {
		State    string `json:"state" jsonschema:"enum=todo,enum=doing,enum=done"`
		Priority string `json:"priority" jsonschema:"enum=urgent,enum=high,enum=medium,enum=low,enum=none"`
	}
	s, err := contract.NewSet(contract.MustOf[data]("workitem.updated", "1.0"))
	if err != nil {
		b.Fatal(err)
	}
	ev := warren.Event{ID: "e1", Type: "workitem.updated", Version: "1.0",
		Payload: warren.Payload{Data: json.RawMessage(`{"state":"done","priority":"high"}`)}}
	b.ReportAllocs()
	for b.Loop() {
		if err := s.Check(ev); err != nil {
			b.Fatal(err)
		}
	}
}
