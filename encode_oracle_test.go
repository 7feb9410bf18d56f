package warren

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"testing"
	"time"
)

// referenceEncode is Encoder.Encode as it was written before the
// allocation-free writer: every string through json.Marshal, every key
// through strconv.Quote, the whole body compacted at the end. It is the
// oracle the fast encoder is checked against byte for byte, so that no
// consumer matching on a body's text sees a change.
func referenceEncode(enc Encoder, ev Event, outboxID int64) ([]byte, error) {
	f, err := ParseFormat(string(enc.Format))
	if err != nil {
		return nil, err
	}
	planeFormat := f == FormatPlane
	var w refWriter
	w.str("event_id", ev.ID, false)
	w.str("event_type", ev.Type, false)
	w.str("entity_type", ev.EntityType, false)
	w.str("entity_id", ev.EntityID, false)
	w.str("workspace_id", ev.WorkspaceID, !planeFormat)
	w.nullable("project_id", ev.ProjectID, planeFormat)
	w.nullable("initiator_id", ev.InitiatorID, planeFormat)
	w.str("initiator_type", ev.InitiatorType, !planeFormat)
	var pw refWriter
	pw.raw("data", orNull(ev.Payload.Data))
	pw.raw("previous_attributes", orNull(ev.Payload.PreviousAttributes))
	payload, err := pw.finish(ev.Payload.Extra)
	if err != nil {
		return nil, err
	}
	w.raw("payload", payload)
	if !planeFormat {
		if !ev.CreatedAt.IsZero() {
			w.str("created_at", ev.CreatedAt.UTC().Format(time.RFC3339Nano), false)
		} else {
			w.str("created_at", "", true) // left out, but known: Extra does not fill it in
		}
		w.str("version", ev.Version, true)
		return refCompact(w.finish(ev.Extra))
	}
	created := ev.CreatedAt
	if created.IsZero() {
		created = time.Now()
	}
	w.raw("timestamp", strconv.AppendInt(nil, created.Unix(), 10))
	p := enc.Publisher
	w.str("version", cmp.Or(ev.Version, p.Version, PlaneEnvelopeVersion), false)
	w.str("publisher", p.Name, false)
	w.str("publisher_instance", p.Instance, false)
	w.str("source", p.Source, false)
	if outboxID != 0 {
		w.raw("outbox_id", strconv.AppendInt(nil, outboxID, 10))
	} else {
		w.raw("outbox_id", json.RawMessage("null"))
	}
	return refCompact(w.finish(ev.Extra))
}

func refCompact(body []byte, err error) ([]byte, error) {
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	if err := json.Compact(&out, body); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

type refWriter struct {
	buf  bytes.Buffer
	seen map[string]bool
}

func (w *refWriter) key(name string) {
	if w.buf.Len() == 0 {
		w.buf.WriteByte('{')
	} else {
		w.buf.WriteByte(',')
	}
	w.buf.WriteString(strconv.Quote(name))
	w.buf.WriteByte(':')
	if w.seen == nil {
		w.seen = map[string]bool{}
	}
	w.seen[name] = true
}

func (w *refWriter) str(name, value string, omitEmpty bool) {
	if omitEmpty && value == "" {
		if w.seen == nil {
			w.seen = map[string]bool{}
		}
		w.seen[name] = true // known: Extra does not fill it in
		return
	}
	w.key(name)
	b, _ := json.Marshal(value)
	w.buf.Write(b)
}

func (w *refWriter) nullable(name, value string, asNull bool) {
	if value == "" && asNull {
		w.raw(name, json.RawMessage("null"))
		return
	}
	w.str(name, value, true)
}

func (w *refWriter) raw(name string, value json.RawMessage) {
	w.key(name)
	w.buf.Write(value)
}

func (w *refWriter) finish(extra map[string]json.RawMessage) ([]byte, error) {
	for _, name := range slices.Sorted(maps.Keys(extra)) {
		if w.seen[name] {
			continue
		}
		value := extra[name]
		if !json.Valid(value) {
			return nil, fmt.Errorf("extra field %q holds invalid JSON", name)
		}
		w.raw(name, value)
	}
	if w.buf.Len() == 0 {
		w.buf.WriteByte('{')
	}
	w.buf.WriteByte('}')
	return w.buf.Bytes(), nil
}

// encodeOracleSeeds are events whose strings, raw parts and extra fields
// take every path of the writer: characters JSON escapes (quotes, control
// characters, <>&, U+2028, invalid UTF-8), jsonb's spacing, known names in
// Extra, keys strconv.Quote spells differently from JSON.
func encodeOracleSeeds() []Event {
	created := time.Date(2026, 11, 29, 10, 0, 0, 123456000, time.FixedZone("x", 3600))
	return []Event{
		{ID: "ev-1", Type: "workitem.updated", EntityType: "issue", EntityID: "e1", WorkspaceID: "w1", ProjectID: "p1",
			InitiatorID: "u1", InitiatorType: "USER", CreatedAt: created, Version: "1.0",
			Payload: Payload{Data: json.RawMessage(`{"state": "done", "n": [1, 2]}`), PreviousAttributes: json.RawMessage(`{"state":"todo"}`)}},
		{ID: "ev-2", Type: "x"},
		{ID: "a\"b\\c", Type: "t<>&\u2028\u2029", EntityType: "\x01\x1f\t\n", EntityID: "é漢字😀", WorkspaceID: "bad\xffutf8", InitiatorType: "\x7f"},
		{ID: "ev-3", Type: "x", Payload: Payload{Data: json.RawMessage(` [ ] `), Extra: map[string]json.RawMessage{
			"zeta": json.RawMessage(`{ "a" : 1 }`), "data": json.RawMessage(`"stale"`), "<k>": json.RawMessage(`true`), "é": json.RawMessage(`null`)}}},
		{ID: "ev-4", Type: "x", Version: "2", Extra: map[string]json.RawMessage{
			"created_at": json.RawMessage(`"stale"`), "event_id": json.RawMessage(`"stale"`), "trace": json.RawMessage(`{"span": "abc"}`),
			"timestamp": json.RawMessage(`1`), "outbox_id": json.RawMessage(`2`), "publisher": json.RawMessage(`"p"`), "a\tb": json.RawMessage(`1`)}},
		{ID: "ev-5", Type: "x", Extra: map[string]json.RawMessage{"bell\a": json.RawMessage(`1`)}},
		{ID: "ev-6", Type: "x", Extra: map[string]json.RawMessage{"bad": json.RawMessage(`{`)}},
		{ID: "ev-7", Type: "x", Payload: Payload{PreviousAttributes: json.RawMessage(`{"a":`)}},
		{ID: "ev-8", Type: "x", Payload: Payload{Extra: map[string]json.RawMessage{"k": json.RawMessage(``)}}},
		{ID: "ev-9", Type: "x", CreatedAt: time.Date(-5, 1, 1, 0, 0, 0, 1, time.UTC)},
		{ID: "ev-10", Type: "x", CreatedAt: time.Date(12000, 1, 1, 0, 0, 0, 0, time.UTC)},
		// Fields warren's envelope leaves out when empty are not taken from
		// Extra: a number there would be an event no consumer can read.
		{ID: "ev-11", Type: "x", Extra: map[string]json.RawMessage{
			"workspace_id": json.RawMessage(`5`), "initiator_type": json.RawMessage(`5`), "project_id": json.RawMessage(`5`),
			"initiator_id": json.RawMessage(`5`), "version": json.RawMessage(`5`), "created_at": json.RawMessage(`5`)}},
	}
}

var encodeOracleEncoders = []Encoder{
	{},
	{Format: FormatWarren},
	{Format: FormatPlane, Publisher: PublisherInfo{Name: "n", Instance: "i<&>", Version: "v", Source: "s\"q"}},
	{Format: FormatPlane},
	{Format: "bogus"},
}

// checkEncodeMatchesReference says where Encode and referenceEncode part
// on one event: the same bytes, or both an error.
func checkEncodeMatchesReference(t *testing.T, ev Event) {
	t.Helper()
	for _, enc := range encodeOracleEncoders {
		for _, id := range []int64{0, 4711} {
			if enc.Format == FormatPlane && ev.CreatedAt.IsZero() {
				ev.CreatedAt = time.Unix(1795860000, 0) // the Plane timestamp would be time.Now() on each side
			}
			got, gotErr := enc.Encode(ev, id)
			want, wantErr := referenceEncode(enc, ev, id)
			if (gotErr == nil) != (wantErr == nil) || !bytes.Equal(got, want) {
				t.Fatalf("format %q, outbox id %d, event %+v:\nEncode    %s (error %v)\nreference %s (error %v)", enc.Format, id, ev, got, gotErr, want, wantErr)
			}
		}
	}
}

func TestEncodeMatchesReference(t *testing.T) {
	for _, ev := range encodeOracleSeeds() {
		checkEncodeMatchesReference(t, ev)
	}
}

func FuzzEncodeMatchesReference(f *testing.F) {
	for _, ev := range encodeOracleSeeds() {
		var extraKey string
		var extraValue []byte
		for k, v := range ev.Extra {
			extraKey, extraValue = k, v
		}
		f.Add(ev.ID, ev.Type, ev.EntityID, ev.ProjectID, ev.Version, []byte(ev.Payload.Data), []byte(ev.Payload.PreviousAttributes), extraKey, extraValue, ev.CreatedAt.UnixNano())
	}
	f.Fuzz(func(t *testing.T, id, typ, entityID, projectID, version string, data, prev []byte, extraKey string, extraValue []byte, created int64) {
		ev := Event{ID: id, Type: typ, EntityID: entityID, ProjectID: projectID, InitiatorID: entityID, InitiatorType: version, Version: version,
			Payload: Payload{Data: data, PreviousAttributes: prev}, CreatedAt: time.Unix(0, created)}
		if extraKey != "" {
			ev.Extra = map[string]json.RawMessage{extraKey: extraValue, "payload": extraValue}
			ev.Payload.Extra = map[string]json.RawMessage{extraKey: extraValue}
		}
		checkEncodeMatchesReference(t, ev)
	})
}
