package cloudevents

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren"
)

// Mode is a content mode of the CloudEvents AMQP binding.
type Mode uint8

const (
	// Binary puts the attributes in headers named with the prefix
	// ("cloudEvents:id"), the data content type in the content_type
	// property and the data, warren's payload, in the body. It is the
	// zero Mode.
	Binary Mode = iota
	// Structured puts the whole event in the body in the JSON event
	// format, with the content type application/cloudevents+json, and
	// sets no header.
	Structured
)

func (m Mode) String() string {
	switch m {
	case Binary:
		return "binary"
	case Structured:
		return "structured"
	}
	return "Mode(" + strconv.Itoa(int(m)) + ")"
}

// ParseMode returns the Mode named s: "binary" or "structured".
func ParseMode(s string) (Mode, error) {
	switch s {
	case "binary":
		return Binary, nil
	case "structured":
		return Structured, nil
	}
	return 0, fmt.Errorf("unknown CloudEvents content mode %q: want \"binary\" or \"structured\"", s)
}

// Encoder writes warren events as CloudEvents for an AMQP 0-9-1 message.
type Encoder struct {
	// Source is every event's source attribute: a URI-reference naming
	// the producing service, stable across its instances and restarts
	// (the specification makes source and id together an event's
	// identity), e.g. "https://example.com/issues" or "/issues". It is
	// required. [PublisherSource] makes one from Plane's publisher
	// fields.
	Source string
	// Mode is the content mode: Binary (the zero Mode) or Structured.
	Mode Mode
	// Prefix names the headers of the binary mode: PrefixColon (the
	// default when empty) or PrefixUnderscore. Structured mode sets no
	// headers.
	Prefix string
}

// Message is an encoded event: what goes into an amqp091-go Publishing's
// ContentType, Headers and Body. Headers is nil in structured mode.
type Message struct {
	ContentType string
	Headers     amqp.Table
	Body        []byte
}

// PublisherSource returns a source naming the publisher that Plane's
// envelope names in its publisher and source fields: "/publisher/source",
// each part escaped as a URI path segment and left out when empty (""
// when both are), so that a relay writing CloudEvents in place of Plane's
// envelope names its events' origin the same way. A source must be
// stable: name the publisher yourself (a relay's default name holds its
// host and process id).
func PublisherSource(p warren.PublisherInfo) string {
	var s string
	for _, part := range []string{p.Name, p.Source} {
		if part != "" {
			s += "/" + url.PathEscape(part)
		}
	}
	return s
}

// attr is one attribute to write.
type attr struct {
	name string
	v    value
}

// Encode returns ev as a CloudEvent in the encoder's mode. An event that
// [warren.Event.Validate] refuses, or that a CloudEvent cannot carry (a
// field that is no CloudEvents String, a time outside the years 0000 to
// 9999, an Extra value that is not JSON), is an error wrapping
// [warren.ErrInvalidEvent]; so is an Encoder without a valid Source
// (then the error says so, and wraps nothing).
func (e Encoder) Encode(ev warren.Event) (Message, error) {
	prefix, err := e.check()
	if err != nil {
		return Message{}, err
	}
	attrs, extra, err := attributes(e.Source, ev)
	if err != nil {
		return Message{}, err
	}
	payload, err := payloadJSON(ev.Payload)
	if err != nil {
		return Message{}, err
	}
	if extra != "" {
		attrs = append(attrs, attr{extraAttr, value{kind: kString, s: extra}})
	}
	if e.Mode == Binary {
		h := make(amqp.Table, len(attrs))
		for _, a := range attrs {
			switch a.v.kind {
			case kBool:
				h[prefix+a.name] = a.v.b
			case kInteger:
				h[prefix+a.name] = a.v.i
			default:
				h[prefix+a.name] = a.v.s
			}
		}
		return Message{ContentType: DataContentType, Headers: h, Body: payload}, nil
	}
	n := len(payload) + 64
	for _, a := range attrs {
		n += len(a.name) + len(a.v.s) + 8
	}
	b := make([]byte, 0, n)
	b = append(b, `{"specversion":"1.0"`...)
	for _, a := range attrs[1:] { // attrs[0] is specversion
		b = append(b, ',')
		b = appendJSONString(b, a.name)
		b = append(b, ':')
		switch a.v.kind {
		case kBool:
			b = strconv.AppendBool(b, a.v.b)
		case kInteger:
			b = strconv.AppendInt(b, int64(a.v.i), 10)
		default:
			b = appendJSONString(b, a.v.s)
		}
		if a.name == attrType {
			b = append(b, `,"datacontenttype":"`+DataContentType+`"`...)
		}
	}
	b = append(b, `,"data":`...)
	b = append(b, payload...)
	b = append(b, '}')
	return Message{ContentType: StructuredContentType, Body: b}, nil
}

// Validate reports what is wrong with the encoder's settings, as Encode
// would: a Source that is no URI-reference, a Mode or Prefix it does not
// know. A relay checks them before it starts.
func (e Encoder) Validate() error {
	_, err := e.check()
	return err
}

// check validates the encoder's settings and returns its header prefix.
func (e Encoder) check() (string, error) {
	if e.Mode != Binary && e.Mode != Structured {
		return "", fmt.Errorf("cloudevents: unknown content mode %v", e.Mode)
	}
	prefix := e.Prefix
	switch prefix {
	case "":
		prefix = PrefixColon
	case PrefixColon, PrefixUnderscore:
	default:
		return "", fmt.Errorf("cloudevents: header prefix %q: want %q or %q", e.Prefix, PrefixColon, PrefixUnderscore)
	}
	if err := checkURIReference(e.Source); err != nil {
		return "", fmt.Errorf("cloudevents: Encoder.Source %.80q: %v", e.Source, err)
	}
	return prefix, nil
}

// attributes returns ev's attributes in the order they are written
// (specversion first), and the warrenextra object of the Extra fields
// that are no attributes of their own ("" when there are none).
func attributes(source string, ev warren.Event) ([]attr, string, error) {
	if err := ev.Validate(); err != nil {
		return nil, "", fmt.Errorf("cloudevents: %w", err)
	}
	str := func(name, s string) attr { return attr{name, value{kind: kString, s: s}} }
	attrs := make([]attr, 0, 12+len(ev.Extra))
	attrs = append(attrs, str(attrSpecVersion, SpecVersion), str(attrID, ev.ID), str(attrSource, source), str(attrType, ev.Type))
	if ev.EntityID != "" { // empty and absent are one to warren
		if err := attrString(ev.EntityID); err != nil {
			return nil, "", invalidf("entity_id cannot be the subject attribute: %v", err)
		}
		attrs = append(attrs, str(attrSubject, ev.EntityID))
	}
	if !ev.CreatedAt.IsZero() {
		t, err := formatTime(ev.CreatedAt)
		if err != nil {
			return nil, "", invalidf("created_at cannot be the time attribute: %v", err)
		}
		attrs = append(attrs, str(attrTime, t))
	}
	for i, s := range [len(warrenAttrs)]string{ev.EntityType, ev.WorkspaceID, ev.ProjectID, ev.InitiatorID, ev.InitiatorType, ev.Version} {
		if s == "" {
			continue
		}
		if err := attrString(s); err != nil {
			return nil, "", invalidf("%s cannot be the %s attribute: %v", warrenAttrs[i].field, warrenAttrs[i].attr, err)
		}
		attrs = append(attrs, str(warrenAttrs[i].attr, s))
	}
	extra, err := extraAttributes(&attrs, ev.Extra)
	return attrs, extra, err
}

// attrString reports why s cannot be an attribute's value.
func attrString(s string) error {
	if len(s) > maxAttributeBytes {
		return fmt.Errorf("it is %d bytes, more than the %d an attribute may hold", len(s), maxAttributeBytes)
	}
	return checkString(s)
}

// extraAttributes appends to attrs the Extra fields that are extension
// attributes of their own, in name order, and returns the others as the
// warrenextra object. A field whose name is one of the envelope's is left
// out, as warren's encoder leaves it out.
func extraAttributes(attrs *[]attr, extra map[string]json.RawMessage) (string, error) {
	names := make([]string, 0, len(extra))
	for name := range extra {
		if !envelopeField(name) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	var obj []byte
	for _, name := range names {
		if !utf8.ValidString(name) {
			return "", invalidf("extra field %q: its name is not UTF-8", name)
		}
		var compact bytes.Buffer
		if err := json.Compact(&compact, extra[name]); err != nil {
			return "", invalidf("extra field %q holds invalid JSON", name)
		}
		raw := compact.Bytes()
		if !utf8.Valid(raw) {
			return "", invalidf("extra field %q is not UTF-8", name)
		}
		if v, ok := extraAsAttribute(name, raw); ok {
			*attrs = append(*attrs, attr{name, v})
			continue
		}
		if obj == nil {
			obj = append(obj, '{')
		} else {
			obj = append(obj, ',')
		}
		obj = appendJSONString(obj, name)
		obj = append(obj, ':')
		obj = append(obj, raw...)
	}
	if obj == nil {
		return "", nil
	}
	obj = append(obj, '}')
	if err := checkString(string(obj)); err != nil {
		return "", invalidf("the extra fields cannot be the %s attribute: %v", extraAttr, err)
	}
	return string(obj), nil
}

// extraAsAttribute returns the attribute value an Extra field takes when
// it is an extension attribute of its own: its name is legal and no
// attribute of the mapping (nor too long for a header), and its compact JSON value is a String, a
// Boolean or an Integer that [extraJSON] writes back byte for byte.
func extraAsAttribute(name string, raw []byte) (value, bool) {
	if !legalName(name) || reserved(name) || len(name) > maxNameBytes {
		return value{}, false
	}
	switch raw[0] {
	case 't', 'f':
		return value{kind: kBool, b: raw[0] == 't'}, true // compact JSON: true or false
	case '"':
		var s string
		if json.Unmarshal(raw, &s) != nil || attrString(s) != nil || !bytes.Equal(appendJSONString(nil, s), raw) {
			return value{}, false
		}
		return value{kind: kString, s: s}, true
	case '{', '[', 'n':
		return value{}, false
	}
	if !canonicalInteger(raw, false) {
		return value{}, false
	}
	n, err := strconv.ParseInt(string(raw), 10, 32)
	if err != nil {
		return value{}, false
	}
	return value{kind: kInteger, i: int32(n)}, true
}

// extraJSON is the Extra value of a foreign extension attribute: the JSON
// of its canonical form (a Timestamp or Binary from a header becomes a
// String).
func extraJSON(v value) json.RawMessage {
	switch v.kind {
	case kBool:
		return strconv.AppendBool(nil, v.b)
	case kInteger:
		return strconv.AppendInt(nil, int64(v.i), 10)
	}
	return appendJSONString(nil, v.canonical())
}

// payloadJSON is the payload as warren's envelope writes it, compact.
func payloadJSON(p warren.Payload) ([]byte, error) {
	b, err := p.MarshalJSON()
	if err != nil {
		return nil, fmt.Errorf("cloudevents: %w: payload: %v", warren.ErrInvalidEvent, err)
	}
	var out bytes.Buffer
	out.Grow(len(b))
	if err := json.Compact(&out, b); err != nil {
		return nil, invalidf("payload is not JSON: %v", err)
	}
	if !utf8.Valid(out.Bytes()) {
		return nil, invalidf("payload is not UTF-8")
	}
	return out.Bytes(), nil
}

// checkURIReference reports why s is not a non-empty URI-reference (RFC
// 3986, section 4.1) that a CloudEvents String can hold.
func checkURIReference(s string) error {
	if s == "" {
		return fmt.Errorf("source is required")
	}
	if len(s) > maxAttributeBytes {
		return fmt.Errorf("it is %d bytes, more than the %d an attribute may hold", len(s), maxAttributeBytes)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case bytes.IndexByte([]byte("-._~:/?#[]@!$&'()*+,;="), c) >= 0:
		case c == '%':
			if i+2 >= len(s) || !isHex(s[i+1]) || !isHex(s[i+2]) {
				return fmt.Errorf("a %% at byte %d is not followed by two hex digits", i)
			}
		default:
			return fmt.Errorf("the byte %q at %d is not allowed in a URI (escape it as %%%02X)", c, i, c)
		}
	}
	if _, err := url.Parse(s); err != nil {
		return err
	}
	return nil
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// invalidError is an event a CloudEvent cannot carry, or a message that
// is no CloudEvent warren can read: it matches warren.ErrInvalidEvent.
type invalidError struct{ msg string }

func (e *invalidError) Error() string        { return "cloudevents: " + e.msg }
func (e *invalidError) Is(target error) bool { return target == warren.ErrInvalidEvent }

func invalidf(format string, args ...any) error {
	return &invalidError{msg: fmt.Sprintf(format, args...)}
}
