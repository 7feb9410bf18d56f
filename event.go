package warren

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Event is the envelope of one change in the event stream. Its JSON field
// names follow the Plane event stream, so producers and consumers written
// for it interoperate with warren.
//
// Fields a producer adds that Event does not know are kept in Extra (and in
// Payload.Extra for the payload object) and written back by MarshalJSON, so
// decoding and re-encoding an event never drops data. The consumer goes
// further and re-publishes the original bytes on retry, dead-letter and
// replay, so those paths are byte-for-byte.
type Event struct {
	ID            string    // event_id: unique, the idempotency key
	Type          string    // event_type, e.g. "workitem.updated"
	EntityType    string    // entity_type, e.g. "issue"
	EntityID      string    // entity_id
	WorkspaceID   string    // workspace_id
	ProjectID     string    // project_id (may be empty)
	InitiatorID   string    // initiator_id (may be empty)
	InitiatorType string    // initiator_type: "USER", "SYSTEM.IMPORT", "SYSTEM.AUTOMATION", …
	Payload       Payload   // payload: data and previous_attributes
	CreatedAt     time.Time // created_at; decoding falls back to "timestamp" (Plane's)
	Version       string    // version of the envelope, e.g. "1.0"

	// Extra holds top-level fields this version of warren does not know,
	// as their raw JSON, so they survive a decode and re-encode.
	Extra map[string]json.RawMessage
}

// Payload is the body of an event: the entity's new state and the values of
// the attributes that changed.
type Payload struct {
	Data               json.RawMessage // payload.data: the entity after the change
	PreviousAttributes json.RawMessage // payload.previous_attributes: changed fields' old values

	// Extra holds payload fields other than data and previous_attributes.
	Extra map[string]json.RawMessage
}

// Initiator types used by Plane; any other string is allowed.
const (
	InitiatorUser             = "USER"
	InitiatorSystemPrefix     = "SYSTEM."
	InitiatorSystemImport     = "SYSTEM.IMPORT"
	InitiatorSystemAutomation = "SYSTEM.AUTOMATION"
)

// ErrInvalidEvent is wrapped by every error that [DecodeEvent] and
// [Event.Validate] return, so a caller can tell a bad message from a broken
// dependency with errors.Is.
var ErrInvalidEvent = errors.New("invalid event")

// DecodeEvent parses and validates one JSON event. Errors wrap
// [ErrInvalidEvent] and name the offending field. The event's raw parts
// (Payload.Data, Extra values) share memory with body, which must not be
// modified afterwards.
func DecodeEvent(body []byte) (Event, error) {
	var ev Event
	if err := ev.UnmarshalJSON(body); err != nil {
		return Event{}, err
	}
	return ev, ev.Validate()
}

// Validate reports whether the event carries what routing and deduplication
// need: an event_id and an event_type, neither containing a control
// character nor starting or ending with white space.
//
// Control characters (U+0000 to U+001F, U+007F to U+009F: newline, carriage
// return, tab, NUL, escape, …) are refused because the id and type travel
// where they break things, and no identifier needs one. They go into HTTP
// headers (the webhook's X-Warren-Event-Id, which Go's HTTP client refuses
// to send with a newline, so the event used to fail every attempt as if the
// endpoint were down), log lines (a newline forges a line), dedup keys
// (Postgres text cannot hold NUL) and the operator's terminal. Such an
// event is malformed, which no retry can fix: the consumer dead-letters it
// at once, class undecodable.
//
// An id or type longer than 255 bytes is refused because warren publishes
// them as the AMQP message_id and type, short strings of at most 255 bytes:
// the relay could not publish such an event, and it would be a dedup key
// of any size (Plane's ids are UUIDs, 36 bytes; its types are short).
//
// Leading or trailing white space is refused because HTTP strips it from a
// header value (Go's client when it sends, receivers when they read): the
// webhook's receiver would see "ev-1" for " ev-1", so the signature over
// the id would not verify, and " ev-1" and "ev-1" would be one event to
// its deduplication. In logs and terminals the two look the same too.
func (e *Event) Validate() error {
	const maxIDLen = 255
	switch {
	case strings.TrimSpace(e.ID) == "":
		return &invalidError{msg: "event_id is missing or empty"}
	case strings.TrimSpace(e.Type) == "":
		return &invalidError{msg: "event_type is missing or empty"}
	}
	for _, f := range []struct{ name, value string }{{"event_id", e.ID}, {"event_type", e.Type}} {
		if len(f.value) > maxIDLen {
			return &invalidError{msg: fmt.Sprintf("%s is %d bytes, longer than the %d an AMQP message_id or type holds", f.name, len(f.value), maxIDLen)}
		}
		if i := strings.IndexFunc(f.value, unicode.IsControl); i >= 0 {
			r, _ := utf8.DecodeRuneInString(f.value[i:])
			return &invalidError{msg: fmt.Sprintf("%s contains a control character (%U at byte %d)", f.name, r, i)}
		}
		if strings.TrimSpace(f.value) != f.value {
			return &invalidError{msg: f.name + " starts or ends with white space"}
		}
	}
	return nil
}

// IsSystemInitiated reports whether a system actor (initiator type
// "SYSTEM.*") caused the event, as opposed to a user.
func (e *Event) IsSystemInitiated() bool {
	return strings.HasPrefix(e.InitiatorType, InitiatorSystemPrefix)
}

// PayloadOf returns the payload of an event whose data is data (a struct or
// map a handler's [Typed] takes) and whose previous attributes are
// previous (nil, or anything that encodes as null: none), each encoded
// with encoding/json. Each must encode as a JSON object, as every consumer
// expects, or it is an error wrapping [ErrInvalidEvent].
func PayloadOf(data, previous any) (Payload, error) {
	var p Payload
	for _, part := range []struct {
		name string
		v    any
		to   *json.RawMessage
	}{{"payload.data", data, &p.Data}, {"payload.previous_attributes", previous, &p.PreviousAttributes}} {
		if part.v == nil && part.to == &p.PreviousAttributes {
			continue
		}
		b, err := json.Marshal(part.v)
		if err != nil {
			return Payload{}, &invalidError{fmt.Sprintf("%s: %v", part.name, err)}
		}
		if part.to == &p.PreviousAttributes && isNull(b) {
			continue
		}
		if k := jsonKind(b); k != "an object" {
			return Payload{}, &invalidError{fmt.Sprintf("%s must be a JSON object, %T encodes as %s", part.name, part.v, k)}
		}
		*part.to = b
	}
	return p, nil
}

// DecodeData unmarshals payload.data into v. It takes Plane's payloads as
// its triggers write them: see [Payload.DecodePreviousAttributes].
func (p Payload) DecodeData(v any) error {
	return decodeRaw("payload.data", p.Data, v)
}

// DecodePreviousAttributes unmarshals payload.previous_attributes into v.
//
// Plane's triggers write some payload parts as text, and both decoders
// take them as they are rather than failing where v wants JSON:
//
//   - A part written as a JSON string holding an object or array
//     (Plane's previous_attributes "{}" on every create and its data "{}"
//     on every soft delete, which is what jsonb_build_object makes of an
//     untyped '{}' literal) decodes as that object or array.
//   - A top-level member written as text where v's field of that name
//     (embedded structs' fields included), or v's map values, want a
//     number, a boolean, an object or an array (Plane's update triggers
//     cast every old value to text: "42", "true", "65535.0") decodes as
//     the JSON that text holds. Members nested deeper are not read so.
//   - null, for the part or a member, leaves v or the member as it is.
//
// Only what fails a plain decode is read this way, so a string target
// still gets the text. Times Plane casts to text ("2024-05-01
// 10:00:00+00", PostgreSQL's format, not RFC 3339) do not decode into a
// time.Time: take them as strings.
func (p Payload) DecodePreviousAttributes(v any) error {
	return decodeRaw("payload.previous_attributes", p.PreviousAttributes, v)
}

type invalidError struct{ msg string }

func (e *invalidError) Error() string        { return "invalid event: " + e.msg }
func (e *invalidError) Is(target error) bool { return target == ErrInvalidEvent }

// UnmarshalJSON decodes the Plane envelope. A known field holding the wrong
// JSON type is an error naming that field; unknown fields go to Extra.
func (e *Event) UnmarshalJSON(data []byte) error {
	// encoding/json would quietly turn invalid UTF-8 into U+FFFD; a body
	// that is not UTF-8 is not JSON, so it is rejected instead.
	if !utf8.Valid(data) {
		return &invalidError{msg: "body is not valid UTF-8"}
	}
	if err := validJSON(data); err != nil {
		return err
	}
	var out Event
	var createdAt, timestamp []byte
	// The string fields' values, unquoted but still in body's memory: they
	// become strings together at the end, in one allocation (see
	// stringFields).
	var strs [len(stringFieldNames)][]byte
	err := eachField("event", data, func(key, raw []byte) error {
		if i := stringField(key); i >= 0 {
			s, err := unquoteString(stringFieldNames[i], raw)
			strs[i] = s // a repeated key: the last one wins (a null one too, as it did before)
			return err
		}
		switch string(key) {
		case "payload":
			if isNull(raw) {
				out.Payload = Payload{}
				return nil
			}
			return out.Payload.decode(raw)
		case "created_at":
			createdAt = raw
			return nil
		case "timestamp":
			// Kept in Extra as well, so an event that said "timestamp"
			// says it again when re-encoded.
			timestamp = raw
		}
		if out.Extra == nil {
			out.Extra = map[string]json.RawMessage{}
		}
		out.Extra[string(key)] = raw
		return nil
	})
	if err != nil {
		return err
	}
	out.setStrings(&strs)
	switch {
	case createdAt != nil:
		out.CreatedAt, err = parseTime("created_at", createdAt)
	case timestamp != nil:
		out.CreatedAt, err = parseTime("timestamp", timestamp)
	}
	if err != nil {
		return err
	}
	*e = out
	return nil
}

// stringFieldNames are the envelope's string fields, in the order of
// Event.stringFields.
var stringFieldNames = [...]string{"event_id", "event_type", "entity_type", "entity_id", "workspace_id",
	"project_id", "initiator_id", "initiator_type", "version"}

// stringField returns key's index in stringFieldNames, or -1.
func stringField(key []byte) int {
	switch string(key) { // no allocation: the compiler compares in place
	case "event_id":
		return 0
	case "event_type":
		return 1
	case "entity_type":
		return 2
	case "entity_id":
		return 3
	case "workspace_id":
		return 4
	case "project_id":
		return 5
	case "initiator_id":
		return 6
	case "initiator_type":
		return 7
	case "version":
		return 8
	}
	return -1
}

// stringFields returns pointers to e's string fields, in the order of
// stringFieldNames.
func (e *Event) stringFields() [len(stringFieldNames)]*string {
	return [...]*string{&e.ID, &e.Type, &e.EntityType, &e.EntityID, &e.WorkspaceID,
		&e.ProjectID, &e.InitiatorID, &e.InitiatorType, &e.Version}
}

// setStrings sets e's string fields from their unquoted values. The
// consumer decodes every message it receives, and two allocations per
// string field (its key's name and its value) were 17 of the 25 of a
// Plane envelope's decode: the values are copied into one string instead,
// which the fields slice. Any one field then keeps all of them alive
// (their length together, at most the body's, MaxBodyBytes), as long as
// it is held.
func (e *Event) setStrings(vals *[len(stringFieldNames)][]byte) {
	n := 0
	for _, v := range vals {
		n += len(v)
	}
	var b strings.Builder
	b.Grow(n)
	for _, v := range vals {
		b.Write(v)
	}
	all := b.String()
	for i, dst := range e.stringFields() {
		*dst, all = all[:len(vals[i])], all[len(vals[i]):]
	}
}

// MarshalJSON encodes the envelope in [FormatWarren]: its known fields, then
// Extra. Keys are written in a fixed order so equal events encode to equal
// bytes. [Encoder] writes the other formats.
func (e Event) MarshalJSON() ([]byte, error) {
	return Encoder{}.Encode(e, 0)
}

// UnmarshalJSON decodes data and previous_attributes; other keys go to Extra.
func (p *Payload) UnmarshalJSON(data []byte) error {
	if err := validJSON(data); err != nil {
		return err
	}
	return p.decode(data)
}

// decode is UnmarshalJSON for data already validated.
func (p *Payload) decode(data []byte) error {
	var out Payload
	err := eachField("payload", data, func(key, raw []byte) error {
		switch string(key) {
		case "data":
			out.Data = raw
		case "previous_attributes":
			out.PreviousAttributes = raw
		default:
			if out.Extra == nil {
				out.Extra = map[string]json.RawMessage{}
			}
			out.Extra[string(key)] = raw
		}
		return nil
	})
	if err != nil {
		return err
	}
	*p = out
	return nil
}

// MarshalJSON encodes data, previous_attributes and Extra; absent parts are
// written as null so consumers see the same keys on every event.
func (p Payload) MarshalJSON() ([]byte, error) {
	var w objectWriter
	if err := w.payload(p); err != nil {
		return nil, err
	}
	return w.buf, nil
}

// parseTime accepts an RFC 3339 string or a number of Unix seconds, the two
// shapes producers use for event times.
func parseTime(name string, raw json.RawMessage) (time.Time, error) {
	if isNull(raw) {
		return time.Time{}, nil
	}
	if raw[0] == '"' {
		s, err := unquote(raw)
		if err != nil {
			return time.Time{}, &invalidError{msg: fmt.Sprintf("%s: %v", name, err)}
		}
		t, err := time.Parse(time.RFC3339Nano, string(s))
		if err != nil {
			return time.Time{}, &invalidError{msg: fmt.Sprintf("%s: %q is not an RFC 3339 time", name, s)}
		}
		return t, nil
	}
	var secs float64
	if json.Unmarshal(raw, &secs) == nil && !math.IsInf(secs, 0) && math.Abs(secs) < 1e12 {
		whole, frac := math.Modf(secs)
		return time.Unix(int64(whole), int64(frac*1e9)).UTC(), nil
	}
	return time.Time{}, &invalidError{msg: fmt.Sprintf("%s must be an RFC 3339 string or Unix seconds, got %s", name, jsonKind(raw))}
}

func isNull(raw []byte) bool { return string(bytes.TrimSpace(raw)) == "null" }

func orNull(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 {
		return json.RawMessage("null")
	}
	return raw
}

func jsonKind(raw []byte) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "nothing"
	}
	switch raw[0] {
	case '"':
		return "a string"
	case '{':
		return "an object"
	case '[':
		return "an array"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	default:
		return "a number"
	}
}

// objectWriter builds a JSON object with known keys first and extra keys
// after them in sorted order. It appends straight to one buffer, without
// an allocation per field: the relay encodes every event it publishes.
//
// With compact set, raw values that come from outside (payload parts,
// Extra values) are compacted as they are written, as json.Marshal does to
// a Marshaler's output; the parts the writer makes itself are compact
// already. Either way the bytes are the ones json.Marshal and
// strconv.Quote wrote before (encode_oracle_test.go holds that writer).
type objectWriter struct {
	buf     []byte
	compact bool
	n       int // keys written
	// known are the known keys, written or left out empty, which an Extra
	// entry of the same name does not override; an object has at most 16
	// of them.
	known  [16]string
	nKnown int
}

// key writes a known name and the colon.
func (w *objectWriter) key(name string) {
	w.open()
	w.buf, _ = appendKey(w.buf, name)
	w.known[w.nKnown] = name
	w.nKnown++
}

// omit records a known name left out because its value is empty: a stale
// copy in Extra must not take the place of a field the event leaves
// empty (an initiator_type of 5 from an outbox row's extra column would
// make every consumer dead-letter the event).
func (w *objectWriter) omit(name string) {
	w.known[w.nKnown] = name
	w.nKnown++
}

// open writes what comes before the next key: the brace or a comma.
func (w *objectWriter) open() {
	if w.n == 0 {
		w.buf = append(w.buf, '{')
	} else {
		w.buf = append(w.buf, ',')
	}
	w.n++
}

// appendKey appends name as strconv.Quote spells it, and the colon. It
// says whether that spelling is JSON: strconv.Quote writes some characters
// in ways JSON does not (\a, \x00), and a name holding one cannot be
// encoded. Known names always are.
func appendKey(buf []byte, name string) ([]byte, bool) {
	if plainString(name) {
		buf = append(buf, '"')
		buf = append(buf, name...)
		return append(buf, '"', ':'), true
	}
	start := len(buf)
	buf = strconv.AppendQuote(buf, name)
	ok := json.Valid(buf[start:])
	return append(buf, ':'), ok
}

// plainString says whether s is printable ASCII that neither JSON nor
// strconv.Quote escapes: json.Marshal also escapes <, > and &.
func plainString(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}

func (w *objectWriter) str(name, value string, omitEmpty bool) {
	if omitEmpty && value == "" {
		w.omit(name)
		return
	}
	w.key(name)
	if plainString(value) {
		w.buf = append(w.buf, '"')
		w.buf = append(w.buf, value...)
		w.buf = append(w.buf, '"')
		return
	}
	b, _ := json.Marshal(value) // a string always marshals
	w.buf = append(w.buf, b...)
}

// nullable writes an optional string: omitted when empty, or written as
// null when asNull (the way a nullable column reads in JSON).
func (w *objectWriter) nullable(name, value string, asNull bool) {
	if value == "" && asNull {
		w.raw(name, json.RawMessage("null"))
		return
	}
	w.str(name, value, true)
}

// raw writes a value the writer made itself, compact JSON.
func (w *objectWriter) raw(name string, value json.RawMessage) {
	w.key(name)
	w.buf = append(w.buf, value...)
}

// external writes a value from outside the writer, compacted when w is:
// a body is compact, and consumers matching on its text (`"id":"x"`) see
// one spelling whichever path encoded it (Postgres' jsonb prints
// `{"id": "x"}`). Compacting refuses a value that is not JSON, as
// json.Marshal does for a Marshaler.
func (w *objectWriter) external(value json.RawMessage) error {
	if !w.compact {
		w.buf = append(w.buf, value...)
		return nil
	}
	out := bytes.NewBuffer(w.buf)
	err := json.Compact(out, value)
	w.buf = out.Bytes()
	if err != nil {
		return fmt.Errorf("warren: event does not encode to JSON (payload.data or previous_attributes is not JSON?): %w", err)
	}
	return nil
}

// payload writes p as an object: data, previous_attributes (null when
// absent, so consumers see the same keys on every event) and its Extra.
func (w *objectWriter) payload(p Payload) error {
	pw := objectWriter{buf: w.buf, compact: w.compact}
	defer func() { w.buf = pw.buf }()
	pw.key("data")
	if err := pw.external(orNull(p.Data)); err != nil {
		return err
	}
	pw.key("previous_attributes")
	if err := pw.external(orNull(p.PreviousAttributes)); err != nil {
		return err
	}
	return pw.finish(p.Extra)
}

// finish writes the Extra entries whose names the writer did not write,
// in sorted order, and closes the object.
func (w *objectWriter) finish(extra map[string]json.RawMessage) error {
	names := make([]string, 0, 8)
	for name := range extra {
		if !slices.Contains(w.known[:w.nKnown], name) { // a known field wins over a stale copy in Extra
			names = append(names, name)
		}
	}
	slices.Sort(names)
	for _, name := range names {
		value := extra[name]
		if !w.compact && !json.Valid(value) {
			return fmt.Errorf("warren: extra field %q holds invalid JSON", name)
		}
		w.open()
		var ok bool
		if w.buf, ok = appendKey(w.buf, name); !ok && w.compact {
			return fmt.Errorf("warren: extra field %q: its name does not encode to JSON", name)
		}
		if err := w.external(value); err != nil {
			return fmt.Errorf("warren: extra field %q holds invalid JSON", name)
		}
	}
	if w.n == 0 {
		w.buf = append(w.buf, '{')
	}
	w.buf = append(w.buf, '}')
	return nil
}
