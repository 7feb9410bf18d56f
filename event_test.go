package warren_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/warrenmq/warren"
)

const planeEvent = `{"event_id":"5b0e8a7e-3f1c-4c1e-9d55-0c6f3e2b9a11","event_type":"workitem.updated",` +
	`"entity_type":"issue","entity_id":"e1","workspace_id":"w1","project_id":"p1",` +
	`"initiator_id":"u1","initiator_type":"USER",` +
	`"payload":{"data":{"state":"done","priority":"high"},"previous_attributes":{"state":"todo"},"diff_version":2},` +
	`"timestamp":"2026-11-29T10:00:00.123Z","version":"1.0","trace":{"span":"abc"}}`

func TestDecodeEventKnownFields(t *testing.T) {
	ev, err := warren.DecodeEvent([]byte(planeEvent))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"ID": ev.ID, "Type": ev.Type, "EntityType": ev.EntityType, "EntityID": ev.EntityID,
		"WorkspaceID": ev.WorkspaceID, "ProjectID": ev.ProjectID, "InitiatorID": ev.InitiatorID,
		"InitiatorType": ev.InitiatorType, "Version": ev.Version,
	}
	got := map[string]string{
		"ID": "5b0e8a7e-3f1c-4c1e-9d55-0c6f3e2b9a11", "Type": "workitem.updated", "EntityType": "issue",
		"EntityID": "e1", "WorkspaceID": "w1", "ProjectID": "p1", "InitiatorID": "u1",
		"InitiatorType": "USER", "Version": "1.0",
	}
	for k := range want {
		if want[k] != got[k] {
			t.Errorf("%s = %q, want %q", k, want[k], got[k])
		}
	}
	if !ev.CreatedAt.Equal(time.Date(2026, 11, 29, 10, 0, 0, 123e6, time.UTC)) {
		t.Errorf("CreatedAt = %v, want the timestamp field", ev.CreatedAt)
	}
	var data struct{ State, Priority string }
	if err := ev.Payload.DecodeData(&data); err != nil || data.State != "done" || data.Priority != "high" {
		t.Errorf("DecodeData = %+v, %v", data, err)
	}
	var prev struct{ State string }
	if err := ev.Payload.DecodePreviousAttributes(&prev); err != nil || prev.State != "todo" {
		t.Errorf("DecodePreviousAttributes = %+v, %v", prev, err)
	}
}

// Unknown fields at the top level and inside payload survive a decode and
// re-encode, field for field.
func TestEventRoundTripKeepsUnknownFields(t *testing.T) {
	ev, err := warren.DecodeEvent([]byte(planeEvent))
	if err != nil {
		t.Fatal(err)
	}
	out, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	var before, after map[string]any
	if err := json.Unmarshal([]byte(planeEvent), &before); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(out, &after); err != nil {
		t.Fatal(err)
	}
	for k, v := range before {
		if !jsonEqual(t, v, after[k]) {
			t.Errorf("field %q: before %v, after %v", k, v, after[k])
		}
	}
	if after["created_at"] == nil {
		t.Error("re-encoded event lacks created_at")
	}
	again, err := warren.DecodeEvent(out)
	if err != nil {
		t.Fatal(err)
	}
	out2, _ := json.Marshal(again)
	if string(out) != string(out2) {
		t.Errorf("encoding is not stable:\n%s\n%s", out, out2)
	}
}

func jsonEqual(t *testing.T, a, b any) bool {
	t.Helper()
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

func TestDecodeEventRejects(t *testing.T) {
	cases := []struct {
		name, body, wantInError string
	}{
		{"not json", `{"event_id":`, "body is not valid JSON"},
		{"array", `[1,2]`, "not a JSON object"},
		{"null", `null`, "event is null"},
		{"missing id", `{"event_type":"workitem.created"}`, "event_id is missing"},
		{"empty id", `{"event_id":"  ","event_type":"workitem.created"}`, "event_id is missing or empty"},
		{"missing type", `{"event_id":"a"}`, "event_type is missing"},
		{"id is a number", `{"event_id":42,"event_type":"x"}`, "event_id must be a string, got a number"},
		{"type is an object", `{"event_id":"a","event_type":{}}`, "event_type must be a string, got an object"},
		{"payload is a string", `{"event_id":"a","event_type":"x","payload":"p"}`, "payload is not a JSON object"},
		{"bad time", `{"event_id":"a","event_type":"x","created_at":"yesterday"}`, "not an RFC 3339 time"},
		{"time is bool", `{"event_id":"a","event_type":"x","created_at":true}`, "got a boolean"},
		{"not utf-8", "{\"event_id\":\"a\xff\",\"event_type\":\"x\"}", "not valid UTF-8"},
		{"newline in id", `{"event_id":"a\nX-Forged: 1","event_type":"x"}`, "event_id contains a control character (U+000A at byte 1)"},
		{"carriage return in id", `{"event_id":"a\r","event_type":"x"}`, "event_id contains a control character (U+000D"},
		{"NUL in id", `{"event_id":"a\u0000","event_type":"x"}`, "event_id contains a control character (U+0000"},
		{"tab in id", `{"event_id":"\ta","event_type":"x"}`, "event_id contains a control character (U+0009 at byte 0)"},
		{"space before the id", `{"event_id":" a","event_type":"x"}`, "event_id starts or ends with white space"},
		{"space after the type", `{"event_id":"a","event_type":"x "}`, "event_type starts or ends with white space"},
		{"no-break space after the id", `{"event_id":"a\u00a0","event_type":"x"}`, "event_id starts or ends with white space"},
		{"escape in id", `{"event_id":"a\u001b[2J","event_type":"x"}`, "event_id contains a control character (U+001B"},
		{"C1 next line in id", `{"event_id":"a\u0085","event_type":"x"}`, "event_id contains a control character (U+0085"},
		{"newline in type", `{"event_id":"a","event_type":"workitem.created\n"}`, "event_type contains a control character (U+000A"},
		// message_id and type are AMQP short strings.
		{"id over 255 bytes", `{"event_id":"` + strings.Repeat("i", 256) + `","event_type":"x"}`, "event_id is 256 bytes, longer than the 255"},
		{"type over 255 bytes", `{"event_id":"a","event_type":"` + strings.Repeat("t", 256) + `"}`, "event_type is 256 bytes"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := warren.DecodeEvent([]byte(tc.body))
			if err == nil {
				t.Fatal("DecodeEvent accepted it")
			}
			if !errors.Is(err, warren.ErrInvalidEvent) {
				t.Errorf("error %v does not match ErrInvalidEvent", err)
			}
			if !strings.Contains(err.Error(), tc.wantInError) {
				t.Errorf("error %q does not say %q", err, tc.wantInError)
			}
		})
	}
}

func TestDecodeEventAcceptsNullsAndUnixTimes(t *testing.T) {
	ev, err := warren.DecodeEvent([]byte(`{"event_id":"a","event_type":"x","project_id":null,"payload":null,"created_at":1764410400.5}`))
	if err != nil {
		t.Fatal(err)
	}
	if ev.ProjectID != "" || ev.Payload.Data != nil {
		t.Errorf("nulls decoded as %+v", ev)
	}
	if want := time.Unix(1764410400, 5e8).UTC(); !ev.CreatedAt.Equal(want) {
		t.Errorf("CreatedAt = %v, want %v", ev.CreatedAt, want)
	}
}

func TestIsSystemInitiated(t *testing.T) {
	for initiator, want := range map[string]bool{
		"SYSTEM.IMPORT": true, "SYSTEM.AUTOMATION": true, "USER": false, "": false, "system.import": false,
	} {
		ev := warren.Event{InitiatorType: initiator}
		if got := ev.IsSystemInitiated(); got != want {
			t.Errorf("IsSystemInitiated(%q) = %v, want %v", initiator, got, want)
		}
	}
}

func FuzzDecodeEvent(f *testing.F) {
	f.Add([]byte(planeEvent))
	f.Add([]byte(planeWireEvent))
	f.Add([]byte(`{"event_id":"a","event_type":"x"}`))
	f.Add([]byte(`{"event_id":"a","event_type":"x","payload":{"data":null},"created_at":0}`))
	f.Add([]byte(`{"event_id":"a\nb","event_type":"x"}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		ev, err := warren.DecodeEvent(body)
		if err != nil {
			if !errors.Is(err, warren.ErrInvalidEvent) {
				t.Fatalf("error %v does not wrap ErrInvalidEvent", err)
			}
			return
		}
		// What decodes is safe to put in a header or a log line.
		if strings.ContainsFunc(ev.ID+ev.Type, unicode.IsControl) {
			t.Fatalf("accepted a control character in event_id %q or event_type %q", ev.ID, ev.Type)
		}
		// Whatever decodes must re-encode, in either format, and decode
		// to the same event, which encodes to the same bytes.
		for _, enc := range []warren.Encoder{{}, {Format: warren.FormatPlane, Publisher: warren.PublisherInfo{Name: "p", Instance: "i", Source: "s"}}} {
			out, err := enc.Encode(ev, 7)
			if err != nil {
				t.Fatalf("re-encode as %q: %v", enc.Format, err)
			}
			again, err := warren.DecodeEvent(out)
			if err != nil {
				t.Fatalf("re-decode of %s: %v", out, err)
			}
			if again.ID != ev.ID || again.Type != ev.Type || again.ProjectID != ev.ProjectID || again.InitiatorID != ev.InitiatorID {
				t.Fatalf("%q changed the event: %+v, then %+v", enc.Format, ev, again)
			}
			out2, _ := enc.Encode(again, 7)
			if string(out) != string(out2) {
				t.Fatalf("unstable in %q:\n%s\n%s", enc.Format, out, out2)
			}
		}
	})
}

func BenchmarkDecodeEvent(b *testing.B) {
	body := []byte(planeEvent)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := warren.DecodeEvent(body); err != nil {
			b.Fatal(err)
		}
	}
}

// The consumer decodes every message it receives: an envelope without
// unknown fields costs one allocation, for its string fields together.
func TestDecodeEventAllocatesOnce(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts differ under the race detector")
	}
	body := []byte(`{"event_id":"5b0e8a7e-3f1c-4c1e-9d55-0c6f3e2b9a11","event_type":"workitem.updated",` +
		`"entity_type":"issue","entity_id":"e1","workspace_id":"w1","project_id":"p1","initiator_id":"u1",` +
		`"initiator_type":"USER","payload":{"data":{"state":"done"},"previous_attributes":{"state":"todo"}},` +
		`"created_at":"2026-11-29T10:00:00.123Z","version":"1.0"}`)
	var ev warren.Event
	allocs := testing.AllocsPerRun(100, func() {
		var err error
		if ev, err = warren.DecodeEvent(body); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 1 {
		t.Errorf("DecodeEvent allocated %v times, want 1", allocs)
	}
	if ev.ID != "5b0e8a7e-3f1c-4c1e-9d55-0c6f3e2b9a11" || ev.Type != "workitem.updated" || ev.EntityID != "e1" || ev.Version != "1.0" {
		t.Errorf("decoded %+v", ev)
	}
}

// BenchmarkEncode encodes the event the relay reads from an outbox row:
// raw parts as Postgres' jsonb prints them, in both formats.
func BenchmarkEncode(b *testing.B) {
	ev, err := warren.DecodeEvent([]byte(planeEvent))
	if err != nil {
		b.Fatal(err)
	}
	ev.Payload.Data = json.RawMessage(`{"state": "done", "priority": "high"}`)
	ev.Payload.PreviousAttributes = json.RawMessage(`{"state": "todo"}`)
	for _, f := range []warren.Format{warren.FormatWarren, warren.FormatPlane} {
		b.Run(string(f), func(b *testing.B) {
			enc := warren.Encoder{Format: f, Publisher: warren.PublisherInfo{Name: "relay", Instance: "host", Source: "warren-relay"}}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := enc.Encode(ev, 4711); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// A decode that needs a second try (Plane's text forms) starts from the
// value as it was: a custom decoder runs once on what is kept, and a map
// keeps no member of the failed try.
func TestDecodeDataRetriesFromTheStart(t *testing.T) {
	var m map[string]int
	p := warren.Payload{Data: []byte(`{"a": 1, "b": "2"}`)}
	if err := p.DecodeData(&m); err != nil || len(m) != 2 || m["a"] != 1 || m["b"] != 2 {
		t.Fatalf("DecodeData = %v, %v", m, err)
	}
	var acc struct {
		Vals appendOnDecode `json:"a"`
		N    int            `json:"n"`
	}
	p = warren.Payload{Data: []byte(`{"a": "x", "n": "5"}`)}
	if err := p.DecodeData(&acc); err != nil || len(acc.Vals) != 1 || acc.N != 5 {
		t.Errorf("DecodeData with a text member: %+v, %v; want one value decoded and n 5", acc, err)
	}
}

// appendOnDecode appends what it decodes, as a decoder with side effects
// would.
type appendOnDecode []string

func (a *appendOnDecode) UnmarshalJSON(b []byte) error {
	*a = append(*a, string(b))
	return nil
}
