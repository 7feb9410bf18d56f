package cloudevents

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren"
)

// Event is a CloudEvent as warren reads it: the warren event, and what the
// CloudEvent says that a warren event has no field for.
type Event struct {
	Event      warren.Event
	Source     string // the source attribute
	DataSchema string // the dataschema attribute, "" when absent
	Mode       Mode   // the content mode the event came in
}

// IsCloudEvent reports whether a message with this content type and these
// headers is a CloudEvent for [Decode] to read: its content type is the
// CloudEvents media type (application/cloudevents, any format), or a
// header's name starts with either prefix, in any case (a misspelled
// prefix is for Decode to refuse, not for another decoder to misread).
// A warren or Plane envelope has neither.
func IsCloudEvent(contentType string, headers amqp.Table) bool {
	if structuredType(contentType) {
		return true
	}
	for k := range headers {
		if hasPrefixFold(k, PrefixColon) || hasPrefixFold(k, PrefixUnderscore) {
			return true
		}
	}
	return false
}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

// structuredType reports whether contentType names an event format: the
// binding's test for the structured mode.
func structuredType(contentType string) bool {
	return hasPrefixFold(strings.TrimSpace(contentType), "application/cloudevents")
}

// Decode reads a CloudEvent from an AMQP 0-9-1 message's content type,
// headers and body, in the mode its content type says (structured for
// application/cloudevents+json, else binary), and returns it as a warren
// event. docs/cloudevents.md has the mapping.
//
// Every error wraps [warren.ErrInvalidEvent] and is [warren.Undecodable],
// so a consumer dead-letters the message at once, in class undecodable:
// a required attribute missing or empty, a specversion other than 1.0, an
// attribute of the wrong type or over 8 KiB, a header name that is no
// legal attribute name or mixes the two prefixes, data that is not the
// JSON object of warren's payload, a structured body that is not a JSON
// object or repeats a member, a header that disagrees with the
// structured body, and an event [warren.Event.Validate] refuses.
//
// Decode does not bound the body: a consumer checks its size first. The
// event's raw parts may share memory with body.
func Decode(contentType string, headers amqp.Table, body []byte) (Event, error) {
	ev, err := decode(contentType, headers, body)
	if err != nil {
		return Event{}, warren.Undecodable(err)
	}
	return ev, nil
}

func decode(contentType string, headers amqp.Table, body []byte) (Event, error) {
	hdr, err := headerAttributes(headers)
	if err != nil {
		return Event{}, err
	}
	if structuredType(contentType) {
		if err := structuredContentType(contentType); err != nil {
			return Event{}, err
		}
		attrs, data, err := structuredAttributes(body)
		if err != nil {
			return Event{}, err
		}
		if err := agree(hdr, attrs); err != nil {
			return Event{}, err
		}
		if v, ok := attrs[attrDataContentType]; ok {
			if v.kind != kString {
				return Event{}, invalidf("datacontenttype is %v, not a String", v.kind)
			}
			if err := jsonContentType(v.s); err != nil {
				return Event{}, err
			}
		}
		return assemble(attrs, data, Structured)
	}
	if len(hdr) == 0 {
		return Event{}, invalidf("not a CloudEvent: the content type %.80q is not %s, and no header starts with %s or %s",
			contentType, StructuredContentType, PrefixColon, PrefixUnderscore)
	}
	if _, ok := hdr["data"]; ok {
		return Event{}, invalidf("a header names data, which is no attribute: in binary mode the data is the body")
	}
	// In binary mode datacontenttype is the content type property; a
	// header of that name must not say otherwise.
	if v, ok := hdr[attrDataContentType]; ok {
		if v.kind != kString || (contentType != "" && v.canonical() != contentType) {
			return Event{}, invalidf("the header datacontenttype %.80q disagrees with the content type %.80q", v.canonical(), contentType)
		}
		contentType = v.s
	}
	if contentType != "" {
		if err := jsonContentType(contentType); err != nil {
			return Event{}, err
		}
	}
	var data []byte
	if len(body) > 0 {
		data = body
	}
	return assemble(hdr, data, Binary)
}

// headerAttributes returns the attributes a message's headers carry, by
// name, from the headers named with one of the prefixes (a message uses
// one of them, never both). Other headers are not the CloudEvent's.
func headerAttributes(h amqp.Table) (map[string]value, error) {
	var names []string
	for k := range h {
		if hasPrefixFold(k, PrefixColon) || hasPrefixFold(k, PrefixUnderscore) {
			names = append(names, k)
		}
	}
	if len(names) == 0 {
		return nil, nil
	}
	slices.Sort(names) // the first bad header is named the same way every time
	attrs := make(map[string]value, len(names))
	var prefix string
	for _, k := range names {
		p := k[:len(PrefixColon)]
		if p != PrefixColon && p != PrefixUnderscore {
			return nil, invalidf("header %.80q: the prefix is spelled %q or %q, and its case matters", k, PrefixColon, PrefixUnderscore)
		}
		if prefix == "" {
			prefix = p
		} else if p != prefix {
			return nil, invalidf("the headers mix the prefixes %q and %q (%.80q): a message uses one", PrefixColon, PrefixUnderscore, k)
		}
		name := k[len(p):]
		if !legalName(name) {
			return nil, invalidf("header %.80q: %.40q is not a legal attribute name (lower-case ASCII letters and digits)", k, name)
		}
		v, ok, err := headerValue(h[k])
		if err != nil {
			return nil, invalidf("header %s: %v", k, err)
		}
		if !ok {
			continue // void: unset
		}
		if err := checkSize(name, v); err != nil {
			return nil, invalidf("header %s: %v", k, err)
		}
		attrs[name] = v
	}
	return attrs, nil
}

func checkSize(name string, v value) error {
	n := len(v.s) + len(v.bin)
	if name != extraAttr && n > maxAttributeBytes {
		return fmt.Errorf("it is %d bytes, more than the %d an attribute may hold", n, maxAttributeBytes)
	}
	return nil
}

// structuredContentType refuses an event format other than JSON, and a
// charset other than UTF-8.
func structuredContentType(contentType string) error {
	mt, params, err := mime.ParseMediaType(contentType)
	if err != nil {
		return invalidf("content type %.80q: %v", contentType, err)
	}
	switch mt {
	case StructuredContentType:
	case "application/cloudevents-batch+json":
		return invalidf("content type %s: the batched mode is not supported, one message is one event", mt)
	default:
		return invalidf("content type %.80q: the only event format warren reads is %s", mt, StructuredContentType)
	}
	return utf8Charset(contentType, params)
}

// jsonContentType refuses a datacontenttype that does not declare JSON
// (a media subtype json or +json, in the JSON format's words) in UTF-8:
// warren's payload is a JSON object.
func jsonContentType(ct string) error {
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil {
		return invalidf("datacontenttype %.80q: %v", ct, err)
	}
	_, sub, _ := strings.Cut(mt, "/")
	if sub != "json" && !strings.HasSuffix(sub, "+json") {
		return invalidf("datacontenttype %.80q is not JSON: warren's payload is a JSON object", ct)
	}
	return utf8Charset(ct, params)
}

func utf8Charset(ct string, params map[string]string) error {
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") && !strings.EqualFold(cs, "utf8") {
		return invalidf("content type %.80q: JSON is UTF-8, not %.40s", ct, cs)
	}
	return nil
}

// structuredAttributes reads a body in the JSON event format: its
// attributes by name, and its data (the bytes of data, or of data_base64
// decoded; nil when neither is there or it is null).
func structuredAttributes(body []byte) (map[string]value, []byte, error) {
	if !utf8.Valid(body) {
		return nil, nil, invalidf("body is not valid UTF-8")
	}
	if !json.Valid(body) {
		var v json.RawMessage
		err := json.Unmarshal(body, &v)
		if err == nil {
			err = errors.New("invalid JSON")
		}
		return nil, nil, invalidf("body is not valid JSON: %v", err)
	}
	if t := bytes.TrimSpace(body); t[0] != '{' {
		return nil, nil, invalidf("body is not a JSON object, got %s", jsonKind(t))
	}
	attrs := map[string]value{}
	var data, data64 json.RawMessage
	seen := map[string]bool{}
	err := members(body, func(key string, raw json.RawMessage) error {
		if seen[key] {
			return fmt.Errorf("the member %.40q appears twice", key)
		}
		seen[key] = true
		switch key {
		case "data":
			data = raw
			return nil
		case "data_base64":
			data64 = raw
			return nil
		}
		if !legalName(key) {
			return fmt.Errorf("the member %.40q is not a legal attribute name (lower-case ASCII letters and digits)", key)
		}
		if len(key) > maxNameBytes {
			return fmt.Errorf("the member %.40q… is %d bytes long, more than an AMQP header's name holds with its prefix (%d)", key, len(key), maxNameBytes)
		}
		v, ok, err := jsonValue(raw)
		if err != nil {
			return fmt.Errorf("%s: %v", key, err)
		}
		if !ok {
			return nil // null: unset
		}
		if err := checkSize(key, v); err != nil {
			return fmt.Errorf("%s: %v", key, err)
		}
		attrs[key] = v
		return nil
	})
	if err != nil {
		return nil, nil, invalidf("%v", err)
	}
	if isNull(data) {
		data = nil
	}
	if isNull(data64) {
		data64 = nil
	}
	switch {
	case data != nil && data64 != nil:
		return nil, nil, invalidf("the body has both data and data_base64")
	case data64 != nil:
		var s string
		if data64[0] != '"' || json.Unmarshal(data64, &s) != nil {
			return nil, nil, invalidf("data_base64 is %s, not a base64 string", jsonKind(data64))
		}
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return nil, nil, invalidf("data_base64 is not base64: %v", err)
		}
		return attrs, b, nil
	}
	return attrs, data, nil
}

// members calls fn with the name and raw value of each member of the JSON
// object body, which json.Valid has accepted.
func members(body []byte, fn func(key string, raw json.RawMessage) error) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	if _, err := dec.Token(); err != nil { // {
		return err
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key, _ := tok.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return err
		}
		if err := fn(key, raw); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil { // }
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("data after the JSON object")
	}
	return nil
}

// agree refuses headers of a structured message that disagree with its
// body: the binding lets a sender repeat the attributes there, and a
// router reading one and a consumer the other must not see two events.
func agree(hdr, body map[string]value) error {
	names := make([]string, 0, len(hdr))
	for name := range hdr {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		h := hdr[name]
		b, ok := body[name]
		if !ok {
			return invalidf("the header for %s has no counterpart in the structured body", name)
		}
		same := h.canonical() == b.canonical()
		if name == attrTime && !same {
			ht, err1 := timeOf(h)
			bt, err2 := timeOf(b)
			if h.kind == kTimestamp {
				// An AMQP 0-9-1 timestamp holds whole seconds: the
				// binding's native form of the body's time, not
				// another time.
				bt = bt.Truncate(time.Second)
			}
			same = err1 == nil && err2 == nil && ht.Equal(bt)
		}
		if !same {
			return invalidf("the header for %s says %.80q, the structured body %.80q", name, h.canonical(), b.canonical())
		}
	}
	return nil
}

// assemble makes the event of a CloudEvent's attributes and data.
func assemble(attrs map[string]value, data []byte, mode Mode) (Event, error) {
	str := func(name string, required bool) (string, error) {
		v, ok := attrs[name]
		switch {
		case !ok && required:
			return "", invalidf("the required attribute %s is missing", name)
		case !ok:
			return "", nil
		case v.kind != kString:
			return "", invalidf("%s is %v, not a String", name, v.kind)
		case v.s == "" && required:
			return "", invalidf("the required attribute %s is empty", name)
		}
		if err := checkString(v.s); err != nil {
			return "", invalidf("%s: %v", name, err)
		}
		return v.s, nil
	}
	out := Event{Mode: mode}
	sv, err := str(attrSpecVersion, true)
	if err != nil {
		return Event{}, err
	}
	if sv != SpecVersion {
		return Event{}, invalidf("specversion %.20q: warren reads CloudEvents %s", sv, SpecVersion)
	}
	ev := &out.Event
	for _, f := range []struct {
		name string
		to   *string
	}{{attrID, &ev.ID}, {attrType, &ev.Type}, {attrSource, &out.Source}} {
		if *f.to, err = str(f.name, true); err != nil {
			return Event{}, err
		}
	}
	for _, f := range []struct {
		name string
		to   *string
	}{{attrSubject, &ev.EntityID}, {attrDataSchema, &out.DataSchema}} {
		if *f.to, err = str(f.name, false); err != nil {
			return Event{}, err
		}
		if _, ok := attrs[f.name]; ok && *f.to == "" {
			return Event{}, invalidf("%s is empty: when present it must not be", f.name)
		}
	}
	if out.DataSchema != "" {
		if u, err := url.Parse(out.DataSchema); err != nil || !u.IsAbs() {
			return Event{}, invalidf("dataschema %.80q is not an absolute URI", out.DataSchema)
		}
	}
	if v, ok := attrs[attrTime]; ok {
		if ev.CreatedAt, err = timeOf(v); err != nil {
			return Event{}, invalidf("time: %v", err)
		}
	}
	for i, to := range [len(warrenAttrs)]*string{&ev.EntityType, &ev.WorkspaceID, &ev.ProjectID, &ev.InitiatorID, &ev.InitiatorType, &ev.Version} {
		if *to, err = str(warrenAttrs[i].attr, false); err != nil {
			return Event{}, err
		}
	}
	if err := extraOf(attrs, ev); err != nil {
		return Event{}, err
	}
	if raw, ok := ev.Extra["timestamp"]; ok && ev.CreatedAt.IsZero() {
		// warren's envelope reads a "timestamp" (Plane's) as the event's
		// time when it has no created_at: so must the event handed on,
		// or it changes, or fails, wherever it is encoded again.
		if ev.CreatedAt, err = planeTimestamp(raw); err != nil {
			return Event{}, err
		}
	}
	if err := payloadOf(data, &ev.Payload); err != nil {
		return Event{}, err
	}
	if err := ev.Validate(); err != nil {
		return Event{}, fmt.Errorf("cloudevents: %w", err)
	}
	return out, nil
}

// timeOf reads the time attribute: an RFC 3339 String, or an AMQP
// timestamp header.
func timeOf(v value) (t time.Time, err error) {
	switch v.kind {
	case kTimestamp:
		// An AMQP timestamp reaches the year 292277026596; RFC 3339,
		// which Encode writes the time in, stops at 9999.
		if y := v.t.UTC().Year(); y < 0 || y > 9999 {
			return t, fmt.Errorf("the timestamp's year %d is outside 0000-9999, which RFC 3339 can write", y)
		}
		return v.t, nil
	case kString:
		return parseTime(v.s)
	}
	return t, fmt.Errorf("%v is not a Timestamp", v.kind)
}

// extraOf fills ev.Extra from the extension attributes the mapping does
// not name and from warrenextra's members.
func extraOf(attrs map[string]value, ev *warren.Event) error {
	for name, v := range attrs {
		if reserved(name) {
			continue
		}
		if envelopeField(name) {
			// payload: warren's encoder would drop an Extra field of
			// that name, and the payload travels as the data.
			return invalidf("the extension attribute %s is named like a field of warren's envelope, which travels as the data", name)
		}
		if ev.Extra == nil {
			ev.Extra = map[string]json.RawMessage{}
		}
		ev.Extra[name] = extraJSON(v)
	}
	v, ok := attrs[extraAttr]
	if !ok {
		return nil
	}
	if v.kind != kString {
		return invalidf("%s is %v, not a String holding a JSON object", extraAttr, v.kind)
	}
	obj := []byte(v.s)
	if !json.Valid(obj) || bytes.TrimSpace(obj)[0] != '{' {
		return invalidf("%s is not a JSON object", extraAttr)
	}
	seen := map[string]bool{}
	return members(obj, func(key string, raw json.RawMessage) error {
		switch {
		case seen[key]:
			return invalidf("%s holds %.40q twice", extraAttr, key)
		case envelopeField(key):
			return invalidf("%s holds %.40q, a field of warren's envelope, which travels as its attribute", extraAttr, key)
		case ev.Extra[key] != nil:
			return invalidf("%s holds %.40q, which is also an extension attribute", extraAttr, key)
		}
		seen[key] = true
		if ev.Extra == nil {
			ev.Extra = map[string]json.RawMessage{}
		}
		ev.Extra[key] = raw
		return nil
	})
}

// planeTimestamp reads a timestamp Extra field as warren's envelope reads
// it when there is no created_at: an RFC 3339 string or Unix seconds.
func planeTimestamp(raw json.RawMessage) (time.Time, error) {
	probe := make([]byte, 0, len(raw)+48)
	probe = append(probe, `{"event_id":"x","event_type":"x","timestamp":`...)
	probe = append(append(probe, raw...), '}')
	ev, err := warren.DecodeEvent(probe)
	if err != nil {
		return time.Time{}, invalidf("there is no time attribute, and the timestamp extension, which warren then reads as the event's time (Plane's), is not one: %v",
			strings.TrimPrefix(err.Error(), "invalid event: "))
	}
	return ev.CreatedAt, nil
}

// payloadOf decodes data, warren's payload: a JSON object, or null or no
// data for an event without one.
func payloadOf(data []byte, p *warren.Payload) error {
	if data == nil || isNull(data) {
		*p = warren.Payload{}
		return nil
	}
	if !utf8.Valid(data) {
		return invalidf("data is not valid UTF-8")
	}
	if !json.Valid(data) {
		return invalidf("data is not valid JSON, which its content type declares")
	}
	if t := bytes.TrimSpace(data); t[0] != '{' {
		return invalidf("data must be a JSON object (warren's payload: data and previous_attributes), got %s", jsonKind(t))
	}
	if err := p.UnmarshalJSON(data); err != nil {
		return invalidf("data: %v", err)
	}
	return nil
}

func isNull(raw []byte) bool { return string(bytes.TrimSpace(raw)) == "null" }

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
	}
	return "a number"
}
