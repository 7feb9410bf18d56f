package warren

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"testing"
	"unicode/utf8"
)

// referenceDecode decodes an event the slow, obvious way — encoding/json
// into maps of raw values — as the oracle the fast scanner is fuzzed
// against.
func referenceDecode(body []byte) (Event, error) {
	if !utf8.Valid(body) {
		return Event{}, fmt.Errorf("not utf-8")
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil || fields == nil {
		return Event{}, fmt.Errorf("not an object: %v", err)
	}
	var ev Event
	for name, dst := range map[string]*string{
		"event_id": &ev.ID, "event_type": &ev.Type, "entity_type": &ev.EntityType, "entity_id": &ev.EntityID,
		"workspace_id": &ev.WorkspaceID, "project_id": &ev.ProjectID, "initiator_id": &ev.InitiatorID,
		"initiator_type": &ev.InitiatorType, "version": &ev.Version,
	} {
		raw, ok := fields[name]
		if !ok {
			continue
		}
		delete(fields, name)
		if err := json.Unmarshal(raw, dst); err != nil {
			return Event{}, err
		}
	}
	if raw, ok := fields["payload"]; ok {
		delete(fields, "payload")
		if !isNull(raw) {
			var p map[string]json.RawMessage
			if err := json.Unmarshal(raw, &p); err != nil {
				return Event{}, err
			}
			ev.Payload.Data, ev.Payload.PreviousAttributes = p["data"], p["previous_attributes"]
			delete(p, "data")
			delete(p, "previous_attributes")
			if len(p) > 0 {
				ev.Payload.Extra = p
			}
		}
	}
	var err error
	if raw, ok := fields["created_at"]; ok {
		delete(fields, "created_at")
		ev.CreatedAt, err = parseTime("created_at", raw)
	} else if raw, ok := fields["timestamp"]; ok {
		ev.CreatedAt, err = parseTime("timestamp", raw)
	}
	if err != nil {
		return Event{}, err
	}
	if len(fields) > 0 {
		ev.Extra = fields
	}
	return ev, ev.Validate()
}

func sameRaw(a, b json.RawMessage) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	xs, _ := json.Marshal(x)
	ys, _ := json.Marshal(y)
	return bytes.Equal(xs, ys)
}

func sameExtra(a, b map[string]json.RawMessage) bool {
	return maps.EqualFunc(a, b, sameRaw)
}

func FuzzDecodeEventMatchesEncodingJSON(f *testing.F) {
	for _, seed := range []string{
		planeEventForOracle,
		`{"event_id":"a","event_type":"x"}`,
		`{"event_id":"a\u00e9\"","event_type":"x","payload":{"data":[1,{"b":"}"}],"z":null}}`,
		`{"event_id":"a","event_type":"x","created_at":1.5e9,"extra":[{"k":"v\\"}"}]}`,
		`{"event_id":"a","event_type":"x","event_id":"b"}`,
		` { "event_id" : "a" , "event_type" : "x" , "payload" : { } } `,
		`{"event_id":null,"event_type":"x"}`,
		`{"event_id":"a","event_type":7}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		got, gotErr := DecodeEvent(body)
		want, wantErr := referenceDecode(body)
		if (gotErr == nil) != (wantErr == nil) {
			t.Fatalf("scanner error %v, encoding/json error %v, for %q", gotErr, wantErr, body)
		}
		if gotErr != nil {
			return
		}
		if got.ID != want.ID || got.Type != want.Type || got.EntityType != want.EntityType || got.EntityID != want.EntityID ||
			got.WorkspaceID != want.WorkspaceID || got.ProjectID != want.ProjectID || got.InitiatorID != want.InitiatorID ||
			got.InitiatorType != want.InitiatorType || got.Version != want.Version || !got.CreatedAt.Equal(want.CreatedAt) ||
			!sameRaw(got.Payload.Data, want.Payload.Data) || !sameRaw(got.Payload.PreviousAttributes, want.Payload.PreviousAttributes) ||
			!sameExtra(got.Payload.Extra, want.Payload.Extra) || !sameExtra(got.Extra, want.Extra) {
			t.Fatalf("decoders disagree on %q:\nscanner  %+v\nreference %+v", body, got, want)
		}
	})
}

const planeEventForOracle = `{"event_id":"5b0e8a7e","event_type":"workitem.updated","entity_type":"issue","entity_id":"e1",` +
	`"workspace_id":"w1","project_id":"p1","initiator_id":"u1","initiator_type":"USER",` +
	`"payload":{"data":{"state":"done"},"previous_attributes":{"state":"todo"},"diff_version":2},` +
	`"timestamp":"2026-11-29T10:00:00.123Z","version":"1.0","trace":{"span":"abc"}}`
