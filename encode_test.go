package warren_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/warrenmq/warren"
)

// planeWireEvent is a body as Plane's outbox poller publishes it: integer
// timestamp, the publisher fields and the outbox row id beside the event,
// nullable ids as null.
const planeWireEvent = `{"event_id":"5b0e8a7e-3f1c-4c1e-9d55-0c6f3e2b9a11","event_type":"workitem.updated",` +
	`"entity_type":"issue","entity_id":"e1","workspace_id":"w1","project_id":"p1","initiator_id":null,` +
	`"initiator_type":"SYSTEM.IMPORT","payload":{"data":{"state":"done"},"previous_attributes":{"state":"todo"}},` +
	`"timestamp":1795860000,"version":"1.0","publisher":"outbox_poller","publisher_instance":"api-7f9c",` +
	`"source":"plane","outbox_id":4711}`

var planePublisher = warren.PublisherInfo{Name: "outbox_poller", Instance: "api-7f9c", Source: "plane"}

func TestDecodeEventAcceptsPlaneWireFormat(t *testing.T) {
	ev, err := warren.DecodeEvent([]byte(planeWireEvent))
	if err != nil {
		t.Fatal(err)
	}
	if !ev.CreatedAt.Equal(time.Unix(1795860000, 0)) {
		t.Errorf("CreatedAt = %v, want the integer timestamp 1795860000", ev.CreatedAt)
	}
	if ev.ID != "5b0e8a7e-3f1c-4c1e-9d55-0c6f3e2b9a11" || ev.InitiatorID != "" || ev.InitiatorType != "SYSTEM.IMPORT" || ev.Version != "1.0" {
		t.Errorf("decoded %+v", ev)
	}
	for k, want := range map[string]string{"publisher": `"outbox_poller"`, "publisher_instance": `"api-7f9c"`, "source": `"plane"`, "outbox_id": `4711`, "timestamp": `1795860000`} {
		if got := string(ev.Extra[k]); got != want {
			t.Errorf("Extra[%q] = %s, want %s", k, got, want)
		}
	}
	// Encoded again in Plane's format, with the same publisher and row,
	// it is the same body byte for byte.
	out, err := warren.Encoder{Format: warren.FormatPlane, Publisher: planePublisher}.Encode(ev, 4711)
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != planeWireEvent {
		t.Errorf("re-encoded in Plane's format:\n got %s\nwant %s", out, planeWireEvent)
	}
}

// What a Plane consumer reads: every field present, with Plane's JSON types.
func TestEncodePlaneFormatFieldsAndTypes(t *testing.T) {
	ev := warren.Event{
		ID: "ev-1", Type: "workitem.created", EntityType: "issue", EntityID: "iss-1", WorkspaceID: "ws",
		InitiatorType: warren.InitiatorUser,
		Payload:       warren.Payload{Data: json.RawMessage(`{"name":"n"}`)},
		CreatedAt:     time.Date(2026, 1, 2, 3, 4, 5, 999e6, time.UTC),
	}
	body, err := warren.Encoder{Format: warren.FormatPlane, Publisher: planePublisher}.Encode(ev, 42)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var got map[string]any
	if err := dec.Decode(&got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"event_id": "ev-1", "event_type": "workitem.created", "entity_type": "issue", "entity_id": "iss-1",
		"workspace_id": "ws", "project_id": nil, "initiator_id": nil, "initiator_type": "USER",
		"payload":   map[string]any{"data": map[string]any{"name": "n"}, "previous_attributes": nil},
		"timestamp": json.Number("1767323045"), // whole seconds, not rounded up
		"version":   "1.0", "publisher": "outbox_poller", "publisher_instance": "api-7f9c", "source": "plane",
		"outbox_id": json.Number("42"),
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Plane envelope\n got %v\nwant %v", got, want)
	}
	// Without an outbox row, outbox_id is there and null: Plane's
	// consumers index the key.
	body, err = warren.Encoder{Format: warren.FormatPlane}.Encode(ev, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(body), `"outbox_id":null`) {
		t.Errorf("no outbox row: %s", body)
	}
}

// An event decoded from warren's format says "created_at", and one decoded
// from Plane's says "timestamp": each encodes in either format and decodes
// back to the same event (Plane's timestamp holding whole seconds).
func TestEncodeEitherFormatDecodesBack(t *testing.T) {
	in, err := warren.DecodeEvent([]byte(planeEvent))
	if err != nil {
		t.Fatal(err)
	}
	delete(in.Extra, "timestamp") // planeEvent's string timestamp, now CreatedAt
	for _, f := range []warren.Format{"", warren.FormatWarren, warren.FormatPlane} {
		body, err := warren.Encoder{Format: f, Publisher: planePublisher}.Encode(in, 9)
		if err != nil {
			t.Fatalf("%q: %v", f, err)
		}
		out, err := warren.DecodeEvent(body)
		if err != nil {
			t.Fatalf("%q: %v\n%s", f, err, body)
		}
		want := in.CreatedAt
		if f == warren.FormatPlane {
			want = want.Truncate(time.Second)
			for _, k := range []string{"timestamp", "publisher", "publisher_instance", "source", "outbox_id"} {
				if _, ok := out.Extra[k]; !ok {
					t.Errorf("%q: %s missing from %s", f, k, body)
				}
				delete(out.Extra, k)
			}
		}
		if !out.CreatedAt.Equal(want) {
			t.Errorf("%q: CreatedAt %v, want %v", f, out.CreatedAt, want)
		}
		out.CreatedAt = in.CreatedAt
		if a, b := fmt.Sprint(in), fmt.Sprint(out); a != b {
			t.Errorf("%q: changed on the way\n in %s\nout %s", f, a, b)
		}
	}
	if _, err := (warren.Encoder{Format: "avro"}).Encode(in, 0); err == nil || !strings.Contains(err.Error(), `"avro"`) {
		t.Errorf("unknown format: %v", err)
	}
}

// Raw parts as Postgres' jsonb returns them (spaces after colons) are
// written compact in every format, as json.Marshal writes them; consumers
// match on the text, and a part that is not JSON is an error.
func TestEncodeIsCompact(t *testing.T) {
	ev := warren.Event{ID: "ev-1", Type: "workitem.created", Payload: warren.Payload{Data: json.RawMessage(`{"id": "user-001", "n": [1, 2]}`)}}
	for _, f := range []warren.Format{warren.FormatWarren, warren.FormatPlane} {
		body, err := warren.Encoder{Format: f}.Encode(ev, 0)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(body), `"data":{"id":"user-001","n":[1,2]}`) {
			t.Errorf("%q: not compact: %s", f, body)
		}
		bad := ev
		bad.Payload.Data = json.RawMessage(`{"id":`)
		if _, err := (warren.Encoder{Format: f}).Encode(bad, 0); err == nil {
			t.Errorf("%q: payload.data that is not JSON encoded", f)
		}
	}
}

// MarshalJSON is warren's format, which stays the default.
func TestMarshalJSONIsWarrenFormat(t *testing.T) {
	ev, err := warren.DecodeEvent([]byte(planeWireEvent))
	if err != nil {
		t.Fatal(err)
	}
	viaMarshal, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	viaEncoder, err := warren.Encoder{Format: warren.FormatWarren}.Encode(ev, 1)
	if err != nil {
		t.Fatal(err)
	}
	if string(viaMarshal) != string(viaEncoder) || !strings.Contains(string(viaMarshal), `"created_at":"2026-11-28T`) {
		t.Errorf("MarshalJSON %s\nEncoder %s", viaMarshal, viaEncoder)
	}
}

func TestParseFormat(t *testing.T) {
	for in, want := range map[string]warren.Format{"": warren.FormatWarren, "warren": warren.FormatWarren, "plane": warren.FormatPlane} {
		if got, err := warren.ParseFormat(in); err != nil || got != want {
			t.Errorf("ParseFormat(%q) = %q, %v", in, got, err)
		}
	}
	if _, err := warren.ParseFormat("Plane"); err == nil {
		t.Error("ParseFormat is exact: Plane")
	}
}

func ExampleEncoder() {
	ev := warren.Event{ID: "ev-1", Type: "label.created", EntityType: "label", EntityID: "l1", WorkspaceID: "w1",
		InitiatorType: warren.InitiatorUser, CreatedAt: time.Unix(1767323045, 0)}
	enc := warren.Encoder{Format: warren.FormatPlane, Publisher: warren.PublisherInfo{Name: "billing", Instance: "host-1", Source: "warren-relay"}}
	body, err := enc.Encode(ev, 17)
	if err != nil {
		panic(err)
	}
	fmt.Println(string(body))
	// Output:
	// {"event_id":"ev-1","event_type":"label.created","entity_type":"label","entity_id":"l1","workspace_id":"w1","project_id":null,"initiator_id":null,"initiator_type":"USER","payload":{"data":null,"previous_attributes":null},"timestamp":1767323045,"version":"1.0","publisher":"billing","publisher_instance":"host-1","source":"warren-relay","outbox_id":17}
}

// A field warren's envelope leaves out because it is empty is not taken
// from Extra either: an outbox row's extra column holding
// {"initiator_type": 5} would otherwise be published as an event every
// consumer refuses.
func TestEmptyFieldsAreNotFilledFromExtra(t *testing.T) {
	ev := warren.Event{ID: "ev-1", Type: "x", Extra: map[string]json.RawMessage{
		"workspace_id": json.RawMessage(`5`), "initiator_type": json.RawMessage(`5`), "created_at": json.RawMessage(`5`)}}
	body, err := warren.Encoder{}.Encode(ev, 0)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(body), "5") {
		t.Errorf("body %s took a field from Extra", body)
	}
	if _, err := warren.DecodeEvent(body); err != nil {
		t.Errorf("the body does not decode: %v", err)
	}
}
