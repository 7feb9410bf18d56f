package warren_test

import (
	"errors"
	"reflect"
	"testing"

	"github.com/warrenmq/warren"
)

// Plane's triggers write payload parts as text: "{}" for an empty
// previous_attributes or a soft delete's data, and every old value of an
// update cast to text. The decoders take them as they are.
func TestDecodeTakesPlanesTextPayloads(t *testing.T) {
	type issue struct {
		StateID   string   `json:"state_id"`
		SortOrder float64  `json:"sort_order"`
		Sequence  int      `json:"sequence_id"`
		IsDraft   bool     `json:"is_draft"`
		Labels    []string `json:"label_ids"`
		Target    *string  `json:"target_date"`
		Name      string   `json:"name"`
	}
	for _, tc := range []struct {
		name, raw string
		want      issue
	}{
		{"a create's previous_attributes", `"{}"`, issue{}},
		{"the string of an object, with space", `" {\"state_id\": \"s1\"} "`, issue{StateID: "s1"}},
		{"null", `null`, issue{}},
		{"an update's old values, cast to text", `{"state_id":"s0","sort_order":"65535.5","sequence_id":"42","is_draft":"true","target_date":null}`,
			issue{StateID: "s0", SortOrder: 65535.5, Sequence: 42, IsDraft: true}},
		{"an array cast to text", `{"label_ids":"[\"l1\", \"l2\"]"}`, issue{Labels: []string{"l1", "l2"}}},
		{"a name that looks like a number stays a string", `{"name":"42","sequence_id":"7"}`, issue{Name: "42", Sequence: 7}},
		{"typed values as to_jsonb writes them", `{"sort_order":65535,"sequence_id":3,"is_draft":false,"label_ids":[]}`,
			issue{SortOrder: 65535, Sequence: 3, Labels: []string{}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, decode := range []func(warren.Payload, any) error{warren.Payload.DecodeData, warren.Payload.DecodePreviousAttributes} {
				p := warren.Payload{Data: []byte(tc.raw), PreviousAttributes: []byte(tc.raw)}
				var got issue
				if err := decode(p, &got); err != nil {
					t.Fatalf("decode %s: %v", tc.raw, err)
				}
				if !reflect.DeepEqual(got, tc.want) {
					t.Errorf("decode %s = %+v, want %+v", tc.raw, got, tc.want)
				}
			}
		})
	}

	// A string target gets the text as it is.
	var text string
	if err := (warren.Payload{Data: []byte(`"{}"`)}).DecodeData(&text); err != nil || text != "{}" {
		t.Errorf("DecodeData into a string = %q, %v; want the text {}", text, err)
	}
	var m map[string]any
	if err := (warren.Payload{Data: []byte(`"{}"`)}).DecodeData(&m); err != nil || m == nil || len(m) != 0 {
		t.Errorf("DecodeData of \"{}\" into a map = %v, %v; want an empty map", m, err)
	}
}

// What no reading of the text mends is still an invalid event, naming
// the part.
func TestDecodeRefusesWhatTextDoesNotMend(t *testing.T) {
	var target struct {
		Sequence int  `json:"sequence_id"`
		Draft    bool `json:"is_draft"`
	}
	for _, raw := range []string{
		`"not json"`,
		`{"sequence_id":"forty-two"}`,
		`{"sequence_id":"\"42\""}`, // text of a string: still a string
		`{"is_draft":"42"}`,        // text of a number where a bool is wanted
		`"[1, 2]"`,                 // an array where an object is wanted
	} {
		err := (warren.Payload{PreviousAttributes: []byte(raw)}).DecodePreviousAttributes(&target)
		if !errors.Is(err, warren.ErrInvalidEvent) {
			t.Errorf("decode %s = %v; want an invalid event", raw, err)
		}
	}
}
