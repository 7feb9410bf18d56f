package contract_test

import (
	"strings"
	"testing"

	"github.com/warrenmq/warren/contract"
)

// Each change is compared the way Schema Registry's modes define
// compatibility, and every break names the contract and the field.
func TestCompare(t *testing.T) {
	type state struct {
		Name  string `json:"name"`
		Order int    `json:"order"`
	}
	type v1 struct {
		Name     string `json:"name"`
		Priority string `json:"priority" jsonschema:"enum=high,enum=low"`
		State    state  `json:"state"`
	}
	type optionalAdded struct {
		v1
		Estimate int `json:"estimate,omitempty"`
	}
	type requiredAdded struct {
		v1
		Estimate int `json:"estimate"`
	}
	type nameRemoved struct {
		Priority string `json:"priority" jsonschema:"enum=high,enum=low"`
		State    state  `json:"state"`
	}
	type nameRetyped struct {
		Name     int    `json:"name"`
		Priority string `json:"priority" jsonschema:"enum=high,enum=low"`
		State    state  `json:"state"`
	}
	type enumGrown struct {
		Name     string `json:"name"`
		Priority string `json:"priority" jsonschema:"enum=high,enum=low,enum=urgent"`
		State    state  `json:"state"`
	}
	type nestedRetyped struct {
		Name     string `json:"name"`
		Priority string `json:"priority" jsonschema:"enum=high,enum=low"`
		State    struct {
			Name  string `json:"name"`
			Order string `json:"order"`
		} `json:"state"`
	}
	old := newSet(t, contract.MustOf[v1]("workitem.updated", "1.0"))
	const k = "workitem.updated"
	for name, tc := range map[string]struct {
		changed                 contract.Contract
		backward, forward, full []string // the breaks' paths
	}{
		"optional field added":   {changed: contract.MustOf[optionalAdded](k, "1.0")},
		"required field added":   {changed: contract.MustOf[requiredAdded](k, "1.0"), backward: []string{"payload.data.estimate"}, full: []string{"payload.data.estimate"}},
		"required field removed": {changed: contract.MustOf[nameRemoved](k, "1.0"), forward: []string{"payload.data.name"}, full: []string{"payload.data.name"}},
		"field retyped":          {changed: contract.MustOf[nameRetyped](k, "1.0"), backward: []string{"payload.data.name"}, forward: []string{"payload.data.name"}, full: []string{"payload.data.name", "payload.data.name"}},
		"enum value added":       {changed: contract.MustOf[enumGrown](k, "1.0"), forward: []string{"payload.data.priority"}, full: []string{"payload.data.priority"}},
		"nested field retyped":   {changed: contract.MustOf[nestedRetyped](k, "1.0"), backward: []string{"payload.data.state.order"}, forward: []string{"payload.data.state.order"}, full: []string{"payload.data.state.order", "payload.data.state.order"}},
		"1.0 dropped, 2.0 added": {changed: contract.MustOf[nameRetyped](k, "2.0"), backward: []string{"payload.data"}, forward: []string{"payload.data"}, full: []string{"payload.data"}},
	} {
		changed := newSet(t, tc.changed)
		for mode, want := range map[contract.Mode][]string{contract.Backward: tc.backward, contract.Forward: tc.forward, contract.Full: tc.full} {
			breaks := contract.Compare(old, changed, mode)
			var paths []string
			for _, b := range breaks {
				paths = append(paths, b.Path)
				if b.Contract != k+"@1.0" || b.Reason == "" {
					t.Errorf("%s, %s: %+v", name, mode, b)
				}
			}
			if strings.Join(paths, " ") != strings.Join(want, " ") {
				t.Errorf("%s, %s: breaks at %v, want %v:\n%v", name, mode, paths, want, breaks)
			}
		}
	}
}

// A keyword the comparison does not know is a break when it differs, never
// a pass.
func TestCompareUnknownKeywordsBreak(t *testing.T) {
	one := func(schema string) *contract.Set {
		return newSet(t, contract.Contract{Type: "t", Version: "1", Schema: []byte(schema)})
	}
	a := one(`{"type":"object","properties":{"v":{"oneOf":[{"type":"string"},{"type":"integer"}]}}}`)
	b := one(`{"type":"object","properties":{"v":{"oneOf":[{"type":"string"}]}}}`)
	breaks := contract.Compare(a, b, contract.Full)
	if len(breaks) == 0 || breaks[0].Path != "payload.data.v" || !strings.Contains(breaks[0].Reason, "oneOf") {
		t.Errorf("oneOf changed: %v", breaks)
	}
	if breaks := contract.Compare(a, a, contract.Full); len(breaks) != 0 {
		t.Errorf("unchanged: %v", breaks)
	}
}
