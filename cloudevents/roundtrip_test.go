package cloudevents_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/cloudevents"
	"github.com/warrenmq/warren/internal/amqpx"
)

// encoders are every way the codec writes an event.
var encoders = []cloudevents.Encoder{
	{Source: "/issues", Mode: cloudevents.Binary},
	{Source: "/issues", Mode: cloudevents.Binary, Prefix: cloudevents.PrefixUnderscore},
	{Source: "https://example.com/issues?x=1#f", Mode: cloudevents.Structured},
}

func name(enc cloudevents.Encoder) string {
	return fmt.Sprintf("%v%s", enc.Mode, strings.TrimPrefix(enc.Prefix, "cloudEvents"))
}

// reference is what warren's own envelope gives back for ev: the event a
// round trip through CloudEvents must equal.
func reference(t testing.TB, ev warren.Event) (warren.Event, bool) {
	t.Helper()
	body, err := warren.Encoder{}.Encode(ev, 0)
	if err != nil {
		return warren.Event{}, false
	}
	back, err := warren.DecodeEvent(body)
	if err != nil {
		return warren.Event{}, false
	}
	return back, true
}

// roundTrip encodes ev with enc and decodes it, failing t on an error.
func roundTrip(t testing.TB, enc cloudevents.Encoder, ev warren.Event) cloudevents.Event {
	t.Helper()
	m, err := enc.Encode(ev)
	if err != nil {
		t.Fatalf("%s: Encode: %v", name(enc), err)
	}
	got, err := cloudevents.Decode(m.ContentType, m.Headers, m.Body)
	if err != nil {
		t.Fatalf("%s: Decode: %v\ncontent type %s\nheaders %v\nbody %s", name(enc), err, m.ContentType, m.Headers, m.Body)
	}
	return got
}

func planeEvent(t testing.TB, body string) warren.Event {
	t.Helper()
	ev, err := warren.DecodeEvent([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

// Events of every shape warren and Plane write come back from either mode
// equal to what warren's own envelope gives back, and an event in that
// form (a decoded one) comes back equal to itself.
func TestRoundTrip(t *testing.T) {
	created := time.Date(2026, 12, 7, 10, 11, 12, 123456789, time.UTC)
	planeEnc := warren.Encoder{Format: warren.FormatPlane, Publisher: warren.PublisherInfo{
		Name: "plane-event-stream", Instance: "api-7f9c", Source: "outbox-poller"}}
	plane := func(ev warren.Event, outboxID int64) warren.Event {
		body, err := planeEnc.Encode(ev, outboxID)
		if err != nil {
			t.Fatal(err)
		}
		return planeEvent(t, string(body))
	}
	base := warren.Event{
		ID: "9b2f1c9e-2a44-4a8e-9d64-5b7d3c1e0a11", Type: "workitem.updated", EntityType: "issue",
		EntityID: "6f1e", WorkspaceID: "ws-1", ProjectID: "p-1", InitiatorID: "u-1", InitiatorType: warren.InitiatorUser,
		Payload:   warren.Payload{Data: json.RawMessage(`{"id":"6f1e","state":"done"}`), PreviousAttributes: json.RawMessage(`{"state":"todo"}`)},
		CreatedAt: created, Version: "1.0",
	}
	with := func(f func(*warren.Event)) warren.Event {
		ev := base
		f(&ev)
		return ev
	}
	cases := map[string]warren.Event{
		"full":    base,
		"minimal": {ID: "e", Type: "t"},
		"no payload parts": with(func(ev *warren.Event) {
			ev.Payload = warren.Payload{}
		}),
		"payload extras": with(func(ev *warren.Event) {
			ev.Payload.Extra = map[string]json.RawMessage{"changed": json.RawMessage(`["state"]`), "z": json.RawMessage(`null`)}
		}),
		"zero time": with(func(ev *warren.Event) { ev.CreatedAt = time.Time{} }),
		"time in another zone, and whole seconds": with(func(ev *warren.Event) {
			ev.CreatedAt = time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("", 5*3600+30*60))
		}),
		"system initiator, no project": with(func(ev *warren.Event) {
			ev.InitiatorType, ev.InitiatorID, ev.ProjectID = warren.InitiatorSystemImport, "", ""
		}),
		"odd strings": with(func(ev *warren.Event) {
			ev.EntityID, ev.EntityType = "a/b?c#d <&> é \u2028 \"q\"", "ISSUE_TYPE.x"
		}),
		"extra fields of every kind": with(func(ev *warren.Event) {
			ev.Extra = map[string]json.RawMessage{
				"tenant": json.RawMessage(`"acme"`), "retries": json.RawMessage(`3`), "urgent": json.RawMessage(`true`),
				"neg": json.RawMessage(`-2147483648`), "big": json.RawMessage(`2147483648`), "negzero": json.RawMessage(`-0`),
				"ratio": json.RawMessage(`1.5`), "exp": json.RawMessage(`1e3`), "nothing": json.RawMessage(`null`),
				"obj": json.RawMessage(`{"a": [1, 2, {"b": null}]}`), "html": json.RawMessage(`"<b>&amp;</b>"`),
				"escaped": json.RawMessage(`"caf\u00e9"`), "ctl": json.RawMessage(`"a\nb"`), "empty": json.RawMessage(`""`),
				"snake_case": json.RawMessage(`"x"`), "UPPER": json.RawMessage(`"x"`), "": json.RawMessage(`"no name"`),
				"id": json.RawMessage(`"not the event id"`), "source": json.RawMessage(`"plane"`), "time": json.RawMessage(`"t"`),
				"data": json.RawMessage(`{"not":"the data"}`), "specversion": json.RawMessage(`"0.3"`),
				"entitytype": json.RawMessage(`"shadow"`), "warrenextra": json.RawMessage(`"{}"`), "version": json.RawMessage(`"stale"`),
				"event_id": json.RawMessage(`"stale"`), "timestamp": json.RawMessage(`1714557600`),
				"averyveryverylongextensionname": json.RawMessage(`"legal, past the 20 the spec recommends"`),
				strings.Repeat("n", 244):         json.RawMessage(`"too long a name for a header"`),
			}
		}),
		"plane update": plane(base, 42),
		"plane create": plane(with(func(ev *warren.Event) {
			ev.Type, ev.Payload.PreviousAttributes, ev.ProjectID, ev.InitiatorID = "workitem.created", json.RawMessage(`"{}"`), "", ""
		}), 7),
		"plane soft delete": plane(with(func(ev *warren.Event) {
			ev.Type = "workitem.deleted"
			ev.Payload = warren.Payload{Data: json.RawMessage(`"{}"`), PreviousAttributes: json.RawMessage(`{"id":"6f1e","name":"old","sequence_id":12,"estimate":"65535.0"}`)}
		}), 0),
		"plane as pika writes it": planeEvent(t, `{"event_id": "e-1", "event_type": "workitem.created", "entity_type": "issue", `+
			`"entity_id": "i-1", "workspace_id": "w-1", "project_id": null, "initiator_id": "None", "initiator_type": "", `+
			`"payload": {"data": {"id": "i-1"}, "previous_attributes": "{}"}, "timestamp": 1714557600, "version": "1.0", `+
			`"publisher": "plane-event-stream", "publisher_instance": "api-1", "source": "outbox-poller", "outbox_id": 9}`),
	}
	for title, ev := range cases {
		want, ok := reference(t, ev)
		if !ok {
			t.Fatalf("%s: warren's own envelope refuses the event", title)
		}
		for _, enc := range encoders {
			t.Run(title+"/"+name(enc), func(t *testing.T) {
				got := roundTrip(t, enc, ev)
				if !reflect.DeepEqual(got.Event, want) {
					t.Errorf("got  %#v\nwant %#v", got.Event, want)
				}
				if got.Source != enc.Source || got.Mode != enc.Mode || got.DataSchema != "" {
					t.Errorf("source %q mode %v dataschema %q; want %q %v none", got.Source, got.Mode, got.DataSchema, enc.Source, enc.Mode)
				}
				again := roundTrip(t, enc, want) // the fixed point: the decoded form comes back as it is
				if !reflect.DeepEqual(again.Event, want) {
					t.Errorf("the decoded event changed on a second round trip:\ngot  %#v\nwant %#v", again.Event, want)
				}
			})
		}
	}
}

// A CloudEvent that another producer wrote comes back the same through
// warren: extension attributes become Extra fields and go out again as
// attributes of their own.
func TestForeignExtensionsRoundTrip(t *testing.T) {
	body := `{"specversion":"1.0","id":"x-1","source":"urn:uuid:6e8bc430-9c3a-11d9-9669-0800200c9a66","type":"com.example.created",` +
		`"subject":"blob.jpg","time":"2018-04-05T17:31:00Z","comexampleextension1":"value","comexampleothervalue":5,"flag":false,` +
		`"dataschema":"https://example.com/schema.json","data":{"data":{"appinfoA":"abc"}}}`
	got, err := cloudevents.Decode(cloudevents.StructuredContentType, nil, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"comexampleextension1": `"value"`, "comexampleothervalue": `5`, "flag": `false`}
	if len(got.Event.Extra) != len(want) {
		t.Errorf("Extra %s, want %v", got.Event.Extra, want)
	}
	for k, v := range want {
		if string(got.Event.Extra[k]) != v {
			t.Errorf("Extra[%s] = %s, want %s", k, got.Event.Extra[k], v)
		}
	}
	if got.DataSchema != "https://example.com/schema.json" || got.Event.EntityID != "blob.jpg" || string(got.Event.Payload.Data) != `{"appinfoA":"abc"}` {
		t.Errorf("got %+v", got)
	}
	for _, mode := range []cloudevents.Mode{cloudevents.Binary, cloudevents.Structured} {
		m, err := cloudevents.Encoder{Source: got.Source, Mode: mode}.Encode(got.Event)
		if err != nil {
			t.Fatal(err)
		}
		if mode == cloudevents.Binary {
			if m.Headers["cloudEvents:comexampleothervalue"] != int32(5) || m.Headers["cloudEvents:flag"] != false ||
				m.Headers["cloudEvents:comexampleextension1"] != "value" || m.Headers["cloudEvents:warrenextra"] != nil {
				t.Errorf("headers %v: want the extensions as attributes of their own, typed", m.Headers)
			}
			continue
		}
		if !strings.Contains(string(m.Body), `"comexampleextension1":"value","comexampleothervalue":5,"flag":false`) {
			t.Errorf("body %s: want the extensions as members of their own, typed", m.Body)
		}
	}
}

// randomEvent makes an event out of r: fields from a small alphabet that
// holds what breaks codecs (quotes, escapes, control characters, HTML,
// non-ASCII, noncharacters), Extra fields of random names and JSON
// values, and payloads of random shapes.
func randomEvent(r *rand.Rand) warren.Event {
	alphabet := []string{"a", "Z", "0", "_", " ", "\"", "\\", "/", "<", "&", "é", "\u2028", "{", "}", ":", "%", "日", "\U0001F600"}
	bad := []string{"\n", "\x00", "\x7f", "\u0085", "\ufffe", "\ufdd0", "\U0010FFFF"} // no CloudEvents String holds them
	str := func(max int) string {
		var b strings.Builder
		for n := r.IntN(max + 1); n > 0; n-- {
			if r.IntN(40) == 0 {
				b.WriteString(bad[r.IntN(len(bad))])
				continue
			}
			b.WriteString(alphabet[r.IntN(len(alphabet))])
		}
		return b.String()
	}
	maybe := func(s string) string {
		if r.IntN(3) == 0 {
			return ""
		}
		return s
	}
	names := []string{"id", "source", "time", "data", "subject", "entitytype", "warrenextra", "version", "event_id", "payload",
		"timestamp", "publisher", "outbox_id", "x", "ext1", "UPPER", "", "dataschema", "datacontenttype", "specversion", "a_b"}
	var jsonValue func(depth int) string
	jsonValue = func(depth int) string {
		switch r.IntN(9) {
		case 0:
			return "null"
		case 1:
			return []string{"true", "false"}[r.IntN(2)]
		case 2:
			return fmt.Sprint(r.Int64N(1<<34) - 1<<33)
		case 3:
			return []string{"1.5", "-0", "1e3", "0", "-1", "2147483647", "-2147483649"}[r.IntN(7)]
		case 4, 5:
			b, _ := json.Marshal(str(6))
			return string(b)
		case 6:
			return []string{`"caf\u00e9"`, `"\u003c"`, `"a\/b"`, `"\ud83d\ude00"`}[r.IntN(4)]
		}
		if depth > 2 {
			return "{}"
		}
		if r.IntN(2) == 0 {
			return "[" + jsonValue(depth+1) + ", " + jsonValue(depth+1) + "]"
		}
		k, _ := json.Marshal(str(3))
		return "{" + string(k) + ": " + jsonValue(depth+1) + "}"
	}
	ev := warren.Event{
		ID: "ev-" + fmt.Sprint(r.Int()), Type: []string{"workitem.created", "a", "com.example.x.v2"}[r.IntN(3)],
		EntityType: maybe(str(5)), EntityID: maybe(str(5)), WorkspaceID: maybe(str(4)), ProjectID: maybe(str(4)),
		InitiatorID: maybe(str(4)), InitiatorType: maybe([]string{"USER", "SYSTEM.IMPORT", ""}[r.IntN(3)]), Version: maybe(str(3)),
	}
	if r.IntN(4) > 0 {
		ev.CreatedAt = time.Unix(r.Int64N(1<<36)-1<<35, r.Int64N(1e9)).In(time.FixedZone("", (r.IntN(48)-24)*1800))
	}
	payload := func() json.RawMessage {
		switch r.IntN(5) {
		case 0:
			return nil
		case 1:
			return json.RawMessage(`"{}"`)
		}
		return json.RawMessage(jsonValue(0))
	}
	ev.Payload.Data, ev.Payload.PreviousAttributes = payload(), payload()
	if r.IntN(4) == 0 {
		ev.Payload.Extra = map[string]json.RawMessage{names[r.IntN(len(names))]: json.RawMessage(jsonValue(1))}
	}
	for n := r.IntN(5); n > 0; n-- {
		if ev.Extra == nil {
			ev.Extra = map[string]json.RawMessage{}
		}
		ev.Extra[names[r.IntN(len(names))]] = json.RawMessage(jsonValue(0))
	}
	return ev
}

// Thousands of random events: each that warren's envelope carries either
// comes back equal from every mode, or is refused by Encode for a reason
// a CloudEvent cannot carry (a control character or noncharacter in a
// String, a year past 9999); none is refused by Decode.
func TestRoundTripRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(36, 3))
	n := 3000
	if testing.Short() {
		n = 300
	}
	var refused, checked int
	for i := 0; i < n; i++ {
		ev := randomEvent(r)
		want, ok := reference(t, ev)
		if !ok {
			continue
		}
		for _, enc := range encoders {
			m, err := enc.Encode(want)
			if err != nil {
				if !cannotCarry(err) {
					t.Fatalf("event %d: %s: Encode: %v\n%#v", i, name(enc), err, want)
				}
				refused++
				continue
			}
			if _, err := amqpx.ContentHeaderSize(amqp.Publishing{Headers: m.Headers}); err != nil {
				t.Fatalf("event %d: %s: amqp091-go cannot write the headers: %v", i, name(enc), err)
			}
			got, err := cloudevents.Decode(m.ContentType, m.Headers, m.Body)
			if err != nil {
				t.Fatalf("event %d: %s: Decode: %v\n%#v\nheaders %v\nbody %s", i, name(enc), err, want, m.Headers, m.Body)
			}
			if !reflect.DeepEqual(got.Event, want) {
				t.Fatalf("event %d: %s:\ngot  %#v\nwant %#v", i, name(enc), got.Event, want)
			}
			checked++
		}
	}
	t.Logf("%d round trips equal, %d events refused as no CloudEvent can carry them", checked, refused)
	if checked < n {
		t.Errorf("only %d round trips checked", checked)
	}
}

func cannotCarry(err error) bool {
	for _, why := range []string{"control character", "noncharacter", "outside RFC 3339's range"} {
		if strings.Contains(err.Error(), why) {
			return true
		}
	}
	return false
}

// FuzzRoundTrip is TestRoundTripRandom driven by the fuzzer's seeds.
func FuzzRoundTrip(f *testing.F) {
	for i := uint64(0); i < 20; i++ {
		f.Add(i)
	}
	f.Fuzz(func(t *testing.T, seed uint64) {
		ev := randomEvent(rand.New(rand.NewPCG(seed, seed>>32)))
		want, ok := reference(t, ev)
		if !ok {
			return
		}
		for _, enc := range encoders {
			m, err := enc.Encode(want)
			if err != nil {
				if !cannotCarry(err) {
					t.Fatalf("%s: Encode: %v", name(enc), err)
				}
				continue
			}
			got, err := cloudevents.Decode(m.ContentType, m.Headers, m.Body)
			if err != nil {
				t.Fatalf("%s: Decode: %v", name(enc), err)
			}
			if !reflect.DeepEqual(got.Event, want) {
				t.Fatalf("%s:\ngot  %#v\nwant %#v", name(enc), got.Event, want)
			}
		}
	})
}
