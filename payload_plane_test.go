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

// Text is read where the field that takes the member is promoted from an
// embedded struct, where the member's name differs in case (encoding/json
// matches names regardless of case), and for a map's values; the members
// keep their order, so of two spellings of a name the same one wins.
func TestDecodeTextOfEmbeddedMapAndCasedMembers(t *testing.T) {
	type Base struct { // exported: encoding/json cannot fill an embedded pointer to an unexported type
		Sequence int  `json:"sequence_id"`
		Draft    bool `json:"is_draft"`
	}
	type withBase struct {
		Base
		StateID string `json:"state_id"`
	}
	type withPointer struct {
		*Base
		StateID string `json:"state_id"`
	}
	p := warren.Payload{PreviousAttributes: []byte(`{"sequence_id":"42","IS_DRAFT":"true","state_id":"s0"}`)}
	var b withBase
	if err := p.DecodePreviousAttributes(&b); err != nil || b.Sequence != 42 || !b.Draft || b.StateID != "s0" {
		t.Errorf("embedded: %+v, %v", b, err)
	}
	var bp withPointer
	if err := p.DecodePreviousAttributes(&bp); err != nil || bp.Base == nil || bp.Sequence != 42 || !bp.Draft {
		t.Errorf("pointer-embedded: %+v, %v", bp, err)
	}
	var m map[string]int
	if err := (warren.Payload{Data: []byte(`{"a":"1","b":2}`)}).DecodeData(&m); err != nil || m["a"] != 1 || m["b"] != 2 {
		t.Errorf("map of ints: %v, %v", m, err)
	}
	var dup struct {
		N int `json:"n"`
		S int `json:"s"`
	}
	if err := (warren.Payload{Data: []byte(`{"s":"1","n":2,"N":3}`)}).DecodeData(&dup); err != nil || dup.N != 3 || dup.S != 1 {
		t.Errorf("two spellings of a name: %+v, %v; want the last one (3), as a plain decode takes", dup, err)
	}
	// Fields that want text keep it: a ",string" option, []byte (base64).
	var textual struct {
		Quoted int    `json:"quoted,string"`
		Bytes  []byte `json:"bytes"`
		Count  int    `json:"count"`
	}
	if err := (warren.Payload{Data: []byte(`{"quoted":"7","bytes":"AQI=","count":"3"}`)}).DecodeData(&textual); err != nil ||
		textual.Quoted != 7 || string(textual.Bytes) != "\x01\x02" || textual.Count != 3 {
		t.Errorf("fields that want text: %+v, %v", textual, err)
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
		`{"sequence_id":"\"42\""}`,   // text of a string: still a string
		`{"is_draft":"42"}`,          // text of a number where a bool is wanted
		`"[1, 2]"`,                   // an array where an object is wanted
		`{"sequence_id":"\u00a042"}`, // text with a no-break space is not a number
	} {
		err := (warren.Payload{PreviousAttributes: []byte(raw)}).DecodePreviousAttributes(&target)
		if !errors.Is(err, warren.ErrInvalidEvent) {
			t.Errorf("decode %s = %v; want an invalid event", raw, err)
		}
	}
}
