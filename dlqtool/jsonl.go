package dlqtool

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"strconv"
	"time"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/dlq"
	"github.com/warrenmq/warren/internal/amqpx"
)

// The export format is JSON Lines: one message per line, as
// [Message.MarshalJSON] writes it.
//
//	{"position":0,"event_id":"…","event_type":"…","metadata":{…},
//	 "properties":{"content_type":"application/json","delivery_mode":2,…},
//	 "headers":{"x-warren-attempts":{"type":"int32","value":5},…},
//	 "body_encoding":"text","body":"{\"event_id\":…}"}
//
// "properties", "headers" and "body" are the message; reading a line back
// restores them exactly, so an import publishes what was exported, byte for
// byte and type for type. "position", "event_id", "event_type" and
// "metadata" are there for people and jq, and are recomputed on import.
//
// A header value that is a string, a boolean or null is written as itself.
// Every other value is an object naming its AMQP type, because JSON has one
// number type and AMQP has ten, and a consumer may care which it gets:
//
//	{"type":"int8"|"uint8"|"int16"|"uint16"|"int32"|"uint32"|"int64","value":42}
//	{"type":"float32"|"float64","value":1.5}        NaN, +Inf, -Inf as strings
//	{"type":"decimal","value":12345,"scale":2}      123.45
//	{"type":"timestamp","value":"2024-05-01T10:00:00Z"}
//	{"type":"bytes","value":"AAE="}                 base64
//	{"type":"string","encoding":"base64","value":"…"} a string that is not UTF-8
//	{"type":"array","value":[…]}
//	{"type":"table","value":{…}}
//
// For hand-written files, a bare JSON number is read as an int64 when it is
// whole and a float64 otherwise, and a bare array as an array. The body is
// text when it is valid UTF-8, otherwise base64 ("body_encoding":"base64");
// property strings that are not UTF-8 use the base64 string form above.

// MaxLineBytes is the default bound on one line of an export file read
// back ([ReadMessages], [ImportOptions].MaxLineBytes), so a corrupt or
// hostile file cannot exhaust memory: reading a line holds about twice the
// line. 16 MiB holds a text body of nearly 16 MiB, or a binary one of 12 MiB
// (base64 adds a third) — twelve times a consumer's default MaxBodyBytes
// (1 MiB), so the oversize messages a consumer dead-letters fit. Messages
// up to RabbitMQ's max_message_size (128 MiB by default) need a higher
// bound: up to 4/3 of the body, plus its headers, for a binary body, and up
// to 6 times a text body full of control characters, which JSON escapes.
const MaxLineBytes = 16 << 20

// ErrLineTooLong is wrapped by the error for a line over the bound; the
// bound is raised with [ImportOptions].MaxLineBytes.
var ErrLineTooLong = errors.New("line too long")

// maxNesting bounds how deep arrays and tables in a header may nest.
const maxNesting = 64

// ErrBadExport is wrapped by every error [ReadMessages] returns for a line
// that is not a message.
var ErrBadExport = errors.New("invalid export")

// typedValue is the JSON form of a header value that JSON cannot carry
// as itself.
type typedValue struct {
	Type     string `json:"type"`
	Encoding string `json:"encoding,omitempty"`
	Scale    *uint8 `json:"scale,omitempty"`
	Value    any    `json:"value"`
}

type typedValueIn struct {
	Type     string          `json:"type"`
	Encoding string          `json:"encoding"`
	Scale    *uint8          `json:"scale"`
	Value    json.RawMessage `json:"value"`
}

func encodeTable(t amqp.Table, depth int) (map[string]any, error) {
	if depth > maxNesting {
		return nil, fmt.Errorf("tables nest deeper than %d", maxNesting)
	}
	out := make(map[string]any, len(t))
	for k, v := range t {
		if !utf8.ValidString(k) {
			return nil, fmt.Errorf("header name %q is not UTF-8 and cannot be exported faithfully", k)
		}
		enc, err := encodeValue(v, depth)
		if err != nil {
			return nil, fmt.Errorf("%q: %w", k, err)
		}
		out[k] = enc
	}
	return out, nil
}

func encodeValue(v any, depth int) (any, error) {
	switch x := v.(type) {
	case nil, bool:
		return x, nil
	case string:
		if utf8.ValidString(x) {
			return x, nil
		}
		return typedValue{Type: "string", Encoding: "base64", Value: base64.StdEncoding.EncodeToString([]byte(x))}, nil
	case int8:
		return typedValue{Type: "int8", Value: x}, nil
	case uint8:
		return typedValue{Type: "uint8", Value: x}, nil
	case int16:
		return typedValue{Type: "int16", Value: x}, nil
	case uint16:
		return typedValue{Type: "uint16", Value: x}, nil
	case int32:
		return typedValue{Type: "int32", Value: x}, nil
	case uint32:
		return typedValue{Type: "uint32", Value: x}, nil
	case int64:
		return typedValue{Type: "int64", Value: x}, nil
	case int:
		// amqp091-go sends a Go int as a 32-bit integer, truncating; the
		// export keeps the value instead.
		return typedValue{Type: "int64", Value: int64(x)}, nil
	case float32:
		return typedValue{Type: "float32", Value: encodeFloat(float64(x), x)}, nil
	case float64:
		return typedValue{Type: "float64", Value: encodeFloat(x, x)}, nil
	case amqp.Decimal:
		return typedValue{Type: "decimal", Scale: &x.Scale, Value: x.Value}, nil
	case time.Time:
		return typedValue{Type: "timestamp", Value: x.UTC().Format(time.RFC3339Nano)}, nil
	case []byte:
		return typedValue{Type: "bytes", Value: base64.StdEncoding.EncodeToString(x)}, nil
	case []any:
		if depth >= maxNesting {
			return nil, fmt.Errorf("arrays nest deeper than %d", maxNesting)
		}
		out := make([]any, len(x))
		for i, item := range x {
			enc, err := encodeValue(item, depth+1)
			if err != nil {
				return nil, fmt.Errorf("[%d]: %w", i, err)
			}
			out[i] = enc
		}
		return typedValue{Type: "array", Value: out}, nil
	case amqp.Table:
		enc, err := encodeTable(x, depth+1)
		if err != nil {
			return nil, err
		}
		return typedValue{Type: "table", Value: enc}, nil
	}
	return nil, fmt.Errorf("unsupported header type %T", v)
}

// encodeFloat returns f itself (marshalled with its own precision), or a
// string for the values JSON numbers cannot hold.
func encodeFloat[F float32 | float64](f float64, orig F) any {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "+Inf"
	case math.IsInf(f, -1):
		return "-Inf"
	}
	return orig
}

func decodeTable(raw map[string]json.RawMessage, depth int) (amqp.Table, error) {
	if depth > maxNesting {
		return nil, fmt.Errorf("tables nest deeper than %d", maxNesting)
	}
	out := make(amqp.Table, len(raw))
	for k, v := range raw {
		if len(k) > 255 {
			return nil, fmt.Errorf("header name %.20q… is %d bytes, AMQP allows 255", k, len(k))
		}
		dec, err := decodeValue(v, depth)
		if err != nil {
			return nil, fmt.Errorf("%q: %w", k, err)
		}
		out[k] = dec
	}
	return out, nil
}

func decodeValue(raw json.RawMessage, depth int) (any, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return nil, errors.New("missing value")
	}
	switch raw[0] {
	case 'n':
		return nil, json.Unmarshal(raw, new(any))
	case 't', 'f':
		var b bool
		return b, json.Unmarshal(raw, &b)
	case '"':
		var s string
		return s, json.Unmarshal(raw, &s)
	case '[':
		return decodeArray(raw, depth)
	case '{':
		return decodeTyped(raw, depth)
	}
	var n json.Number
	if err := json.Unmarshal(raw, &n); err != nil {
		return nil, err
	}
	if i, err := n.Int64(); err == nil {
		return i, nil
	}
	return n.Float64()
}

func decodeArray(raw json.RawMessage, depth int) ([]any, error) {
	if depth >= maxNesting {
		return nil, fmt.Errorf("arrays nest deeper than %d", maxNesting)
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, err
	}
	out := make([]any, len(items))
	for i, item := range items {
		dec, err := decodeValue(item, depth+1)
		if err != nil {
			return nil, fmt.Errorf("[%d]: %w", i, err)
		}
		out[i] = dec
	}
	return out, nil
}

func decodeTyped(raw json.RawMessage, depth int) (any, error) {
	var tv typedValueIn
	if err := strictUnmarshal(raw, &tv); err != nil {
		return nil, fmt.Errorf(`an object must be {"type": …, "value": …}: %w`, err)
	}
	if len(tv.Value) == 0 {
		return nil, fmt.Errorf("%s value is missing", tv.Type)
	}
	if tv.Encoding != "" && tv.Type != "string" {
		return nil, fmt.Errorf("encoding applies to strings only, not %s", tv.Type)
	}
	if tv.Scale != nil && tv.Type != "decimal" {
		return nil, fmt.Errorf("scale applies to decimals only, not %s", tv.Type)
	}
	switch tv.Type {
	case "int8":
		return decodeInt[int8](tv.Value)
	case "uint8":
		return decodeInt[uint8](tv.Value)
	case "int16":
		return decodeInt[int16](tv.Value)
	case "uint16":
		return decodeInt[uint16](tv.Value)
	case "int32":
		return decodeInt[int32](tv.Value)
	case "uint32":
		return decodeInt[uint32](tv.Value)
	case "int64":
		return decodeInt[int64](tv.Value)
	case "float32":
		f, err := decodeFloat(tv.Value, 32)
		return float32(f), err
	case "float64":
		return decodeFloat(tv.Value, 64)
	case "decimal":
		if tv.Scale == nil {
			return nil, errors.New("decimal needs a scale")
		}
		v, err := decodeInt[int32](tv.Value)
		return amqp.Decimal{Scale: *tv.Scale, Value: v}, err
	case "timestamp":
		var s string
		if err := json.Unmarshal(tv.Value, &s); err != nil {
			return nil, fmt.Errorf("timestamp: %w", err)
		}
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return nil, fmt.Errorf("timestamp: %w", err)
		}
		// amqp091-go reads timestamps with time.Unix; so does this, so a
		// header read back compares equal to one read from the broker.
		return time.Unix(t.Unix(), int64(t.Nanosecond())), nil
	case "bytes":
		return decodeBase64(tv.Value)
	case "string":
		switch tv.Encoding {
		case "base64":
			b, err := decodeBase64(tv.Value)
			return string(b), err
		case "":
			var s string
			return s, json.Unmarshal(tv.Value, &s)
		}
		return nil, fmt.Errorf("unknown string encoding %q", tv.Encoding)
	case "array":
		return decodeArray(tv.Value, depth)
	case "table":
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(tv.Value, &fields); err != nil {
			return nil, fmt.Errorf("table: %w", err)
		}
		if fields == nil {
			return nil, errors.New("table value must be an object")
		}
		return decodeTable(fields, depth+1)
	case "":
		return nil, errors.New(`an object must be {"type": …, "value": …}: type is missing`)
	}
	return nil, fmt.Errorf("unknown type %q", tv.Type)
}

func decodeInt[I int8 | uint8 | int16 | uint16 | int32 | uint32 | int64](raw json.RawMessage) (I, error) {
	var n json.Number
	if err := json.Unmarshal(raw, &n); err != nil || bytes.HasPrefix(raw, []byte(`"`)) {
		return 0, fmt.Errorf("%T: want a number, got %s", I(0), raw)
	}
	i, err := strconv.ParseInt(n.String(), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%T: %s is not an integer in range", I(0), n)
	}
	if int64(I(i)) != i {
		return 0, fmt.Errorf("%T: %d is out of range", I(0), i)
	}
	return I(i), nil
}

func decodeFloat(raw json.RawMessage, bits int) (float64, error) {
	var v any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return 0, err
	}
	switch x := v.(type) {
	case json.Number:
		f, err := strconv.ParseFloat(x.String(), bits)
		if err != nil {
			return 0, fmt.Errorf("float%d: %w", bits, err)
		}
		return f, nil
	case string:
		switch x {
		case "NaN":
			return math.NaN(), nil
		case "+Inf", "Inf":
			return math.Inf(1), nil
		case "-Inf":
			return math.Inf(-1), nil
		}
	}
	return 0, fmt.Errorf("float%d: want a number, \"NaN\", \"+Inf\" or \"-Inf\", got %s", bits, raw)
}

func decodeBase64(raw json.RawMessage) ([]byte, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, fmt.Errorf("want base64 text: %w", err)
	}
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("base64: %w", err)
	}
	return b, nil
}

func strictUnmarshal(raw []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data after the JSON value")
	}
	return nil
}

// wireString is an AMQP short string property. It is written as a JSON
// string when it is UTF-8 and in the base64 string form otherwise.
type wireString string

func (s wireString) MarshalJSON() ([]byte, error) {
	v, err := encodeValue(string(s), 0)
	if err != nil {
		return nil, err
	}
	return json.Marshal(v)
}

func (s *wireString) UnmarshalJSON(raw []byte) error {
	v, err := decodeValue(raw, 0)
	if err != nil {
		return err
	}
	str, ok := v.(string)
	if !ok {
		return fmt.Errorf("want a string, got %s", raw)
	}
	*s = wireString(str)
	return nil
}

type propertiesJSON struct {
	ContentType     wireString `json:"content_type,omitzero"`
	ContentEncoding wireString `json:"content_encoding,omitzero"`
	DeliveryMode    uint8      `json:"delivery_mode,omitzero"`
	Priority        uint8      `json:"priority,omitzero"`
	CorrelationID   wireString `json:"correlation_id,omitzero"`
	ReplyTo         wireString `json:"reply_to,omitzero"`
	Expiration      wireString `json:"expiration,omitzero"`
	MessageID       wireString `json:"message_id,omitzero"`
	Timestamp       time.Time  `json:"timestamp,omitzero"`
	Type            wireString `json:"type,omitzero"`
	UserID          wireString `json:"user_id,omitzero"`
	AppID           wireString `json:"app_id,omitzero"`
}

type deathJSON struct {
	Queue       string    `json:"queue"`
	Reason      string    `json:"reason"`
	Exchange    string    `json:"exchange"`
	RoutingKeys []string  `json:"routing_keys,omitempty"`
	Count       int64     `json:"count"`
	Time        time.Time `json:"time,omitzero"`
}

// metadataJSON is the decoded failure record, written for readers of an
// export or of `warren dlq ls --json`; it is never read back.
type metadataJSON struct {
	Class            dlq.Class   `json:"class,omitempty"`
	Error            string      `json:"error,omitempty"`
	Attempts         int         `json:"attempts,omitempty"`
	FirstFailure     time.Time   `json:"first_failure,omitzero"`
	LastFailure      time.Time   `json:"last_failure,omitzero"`
	OriginQueue      string      `json:"origin_queue,omitempty"`
	OriginExchange   string      `json:"origin_exchange,omitempty"`
	OriginRoutingKey string      `json:"origin_routing_key,omitempty"`
	Consumer         string      `json:"consumer,omitempty"`
	Host             string      `json:"host,omitempty"`
	Replays          int         `json:"replays,omitempty"`
	Deaths           []deathJSON `json:"x_death,omitempty"`
	FirstDeath       *deathJSON  `json:"first_death,omitempty"`
	Problems         []string    `json:"problems,omitempty"`
	ReplayTo         string      `json:"replay_to,omitempty"`
}

type messageJSON struct {
	Position     int            `json:"position"`
	EventID      string         `json:"event_id,omitempty"`
	EventType    string         `json:"event_type,omitempty"`
	Metadata     metadataJSON   `json:"metadata"`
	Properties   propertiesJSON `json:"properties"`
	Headers      map[string]any `json:"headers,omitempty"`
	BodyEncoding string         `json:"body_encoding"`
	Body         string         `json:"body"`
}

// MarshalJSON writes m as one line of the export format: the whole message
// and, for people, its decoded metadata.
func (m Message) MarshalJSON() ([]byte, error) {
	headers, err := encodeTable(m.Headers, 0)
	if err != nil {
		return nil, fmt.Errorf("message %s: header %w", describe(&m), err)
	}
	md := m.Metadata
	out := messageJSON{
		Position:  m.Position,
		EventID:   m.EventID,
		EventType: m.EventType,
		Metadata: metadataJSON{
			Class: md.Class, Error: md.Error, Attempts: md.Attempts,
			FirstFailure: md.FirstFailure, LastFailure: md.LastFailure,
			OriginQueue: md.OriginQueue, OriginExchange: md.OriginExchange, OriginRoutingKey: md.OriginRoutingKey,
			Consumer: md.Consumer, Host: md.Host, Replays: md.Replays, Problems: md.Problems,
			ReplayTo: m.replayTo,
		},
		Properties: propertiesJSON{
			ContentType: wireString(m.ContentType), ContentEncoding: wireString(m.ContentEncoding),
			DeliveryMode: m.DeliveryMode, Priority: m.Priority,
			CorrelationID: wireString(m.CorrelationId), ReplyTo: wireString(m.ReplyTo),
			Expiration: wireString(m.Expiration), MessageID: wireString(m.MessageId),
			Timestamp: m.Timestamp, Type: wireString(m.Type),
			UserID: wireString(m.UserId), AppID: wireString(m.AppId),
		},
		Headers:      headers,
		BodyEncoding: "text",
		Body:         string(m.Body),
	}
	for _, d := range md.Deaths {
		out.Metadata.Deaths = append(out.Metadata.Deaths, deathJSON(d))
	}
	if md.FirstDeath.Reason != "" {
		fd := deathJSON(md.FirstDeath)
		out.Metadata.FirstDeath = &fd
	}
	if len(headers) == 0 {
		out.Headers = nil
	}
	if !utf8.Valid(m.Body) {
		out.BodyEncoding, out.Body = "base64", base64.StdEncoding.EncodeToString(m.Body)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(out); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// UnmarshalJSON reads one line of the export format. Only the message
// (properties, headers, body) and the position are taken from it; the event
// id and type and the metadata are derived from the message again. Field
// names must be spelt as the export writes them; an unknown field is an
// error.
//
// Memory: the line is not copied. The body is decoded straight out of it,
// into the body's own memory: a line of n bytes costs about n more.
func (m *Message) UnmarshalJSON(data []byte) error { return m.decode(data, true) }

// decode reads one line into m. Without withBody, the body is checked but
// not kept (m.Body is nil), which costs no memory of the body's size: what
// a check of the whole file needs.
func (m *Message) decode(data []byte, withBody bool) error {
	var fields map[string]rawValue
	if err := json.Unmarshal(data, &fields); err != nil {
		return err
	}
	var (
		position         int
		pr               propertiesJSON
		headers          amqp.Table
		encoding         string
		body             []byte
		rawBody, rawHead rawValue
	)
	for name, raw := range fields {
		var err error
		switch name {
		case "position":
			err = json.Unmarshal(raw, &position)
		case "event_id", "event_type", "metadata": // derived from the message again
		case "properties":
			err = strictUnmarshal(raw, &pr)
		case "headers":
			rawHead = raw
		case "body_encoding":
			err = json.Unmarshal(raw, &encoding)
		case "body":
			rawBody = raw
		default:
			err = errors.New("unknown field")
		}
		if err != nil {
			return fmt.Errorf("%q: %w", name, err)
		}
	}
	if rawBody == nil || string(rawBody) == "null" {
		return errors.New(`"body" is missing`)
	}
	body, size, err := decodeBody(rawBody, encoding, withBody)
	if err != nil {
		return fmt.Errorf("body: %w", err)
	}
	if rawHead != nil {
		var raw map[string]json.RawMessage
		if err := json.Unmarshal(rawHead, &raw); err != nil {
			return fmt.Errorf("headers: %w", err)
		}
		if raw != nil {
			if headers, err = decodeTable(raw, 0); err != nil {
				return fmt.Errorf("header %w", err)
			}
		}
	}
	ts := pr.Timestamp
	if !ts.IsZero() {
		ts = time.Unix(ts.Unix(), int64(ts.Nanosecond()))
	}
	*m = newMessage(position, amqp.Publishing{
		Headers:     headers,
		ContentType: string(pr.ContentType), ContentEncoding: string(pr.ContentEncoding),
		DeliveryMode: pr.DeliveryMode, Priority: pr.Priority,
		CorrelationId: string(pr.CorrelationID), ReplyTo: string(pr.ReplyTo),
		Expiration: string(pr.Expiration), MessageId: string(pr.MessageID),
		Timestamp: ts, Type: string(pr.Type),
		UserId: string(pr.UserID), AppId: string(pr.AppID),
		Body: body,
	})
	if !withBody { // read without its body: its size stands for it
		m.bodySize = size
	}
	return nil
}

// rawValue is a JSON value where it stands in the line being decoded, not
// a copy of it (json.RawMessage copies): every use of it ends before the
// line's buffer is used again.
type rawValue []byte

func (v *rawValue) UnmarshalJSON(b []byte) error {
	*v = b
	return nil
}

// decodeBody returns the body that raw, a JSON string in the line, stands
// for, in memory of its own (the reader reuses the line's buffer), and its
// size. Without keep it only checks the body and measures it, and returns
// no body.
func decodeBody(raw rawValue, encoding string, keep bool) ([]byte, int, error) {
	if !keep && (encoding == "" || encoding == "text") && len(raw) > 1 && raw[0] == '"' && !bytes.ContainsRune(raw, '\\') {
		return nil, len(raw) - 2, nil // valid JSON (the line parsed) with nothing escaped: its text is raw's
	}
	text, shared, err := unquote(raw)
	if err != nil {
		return nil, 0, err
	}
	switch encoding {
	case "", "text":
		switch {
		case !keep:
			return nil, len(text), nil
		case len(text) == 0:
			return []byte{}, 0, nil
		case shared:
			return bytes.Clone(text), len(text), nil
		}
		return text, len(text), nil
	case "base64":
		if !keep {
			n, err := io.Copy(io.Discard, base64.NewDecoder(base64.StdEncoding, bytes.NewReader(text)))
			return nil, int(n), err
		}
		body := make([]byte, base64.StdEncoding.DecodedLen(len(text)))
		n, err := base64.StdEncoding.Decode(body, text)
		if err != nil {
			return nil, 0, err
		}
		return body[:n], n, nil
	}
	return nil, 0, fmt.Errorf("body_encoding %q: want \"text\" or \"base64\"", encoding)
}

// unquotedText is a JSON string's text as encoding/json unquotes it.
type unquotedText []byte

func (u *unquotedText) UnmarshalText(b []byte) error {
	*u = b
	return nil
}

// unquote returns the text of the JSON string raw without a second copy:
// encoding/json hands a TextUnmarshaler either raw's own bytes (a string
// with nothing to unescape) or a buffer it made for the unescaped text and
// will not use again. shared says which, so a caller that must own the
// text copies only in the first case.
func unquote(raw rawValue) (text []byte, shared bool, err error) {
	if len(raw) == 0 || raw[0] != '"' {
		return nil, false, errors.New("want a JSON string")
	}
	var u unquotedText
	if err := json.Unmarshal(raw, &u); err != nil {
		return nil, false, err
	}
	return u, len(u) > 0 && &u[0] == &raw[1], nil
}

// ExportOptions select the messages [Queue.Export] writes.
type ExportOptions struct {
	Filter Filter
	// Limit is the most messages to write. 0 means all that match.
	Limit    int
	Progress func(Progress)
}

// Export writes the matching messages to w as JSON Lines, head of the queue
// first, and leaves the queue as it was. It returns how many it wrote.
func (q *Queue) Export(ctx context.Context, w io.Writer, opts ExportOptions) (int, error) {
	if err := opts.Filter.Validate(); err != nil {
		return 0, err
	}
	if opts.Limit < 0 {
		return 0, errNegativeLimit
	}
	bw := bufio.NewWriter(w)
	var p Progress
	sel := opts.Filter.selector(time.Now())
	err := q.scan(ctx, prefetchFor(opts.Filter, opts.Limit, false), &p, opts.Progress, func(_ *amqp.Delivery, m *Message) (bool, error) {
		if !sel.take(m, &p) {
			return true, nil
		}
		p.Matched++
		line, err := m.MarshalJSON()
		if err != nil {
			return false, err
		}
		if _, err := bw.Write(append(line, '\n')); err != nil {
			return false, fmt.Errorf("write export: %w", err)
		}
		p.Done++
		return opts.Limit <= 0 || p.Done < opts.Limit, nil
	})
	if ferr := bw.Flush(); err == nil && ferr != nil {
		err = fmt.Errorf("write export: %w", ferr)
	}
	return p.Done, err
}

// ReadMessages reads a JSON Lines export back, checking every line before
// returning any, so a damaged file is refused whole rather than imported in
// part. Blank lines are skipped; lines are at most [MaxLineBytes]. Errors
// wrap [ErrBadExport] and name the line. It holds the whole file in memory;
// [Queue.ImportFile] imports one line at a time.
func ReadMessages(r io.Reader) ([]Message, error) {
	er := newExportReader(r, MaxLineBytes)
	var out []Message
	for {
		m, err := er.next(true)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
}

// exportReader reads an export one message at a time, each line in place
// in its read buffer, so reading holds one line (and the message decoded
// from it), never the file.
type exportReader struct {
	br   *bufio.Reader
	max  int
	line int // the number of the line last read
}

func newExportReader(r io.Reader, maxLineBytes int) *exportReader {
	max := cmp.Or(maxLineBytes, MaxLineBytes)
	// The buffer holds the longest line and its newline. Fed small reads,
	// bufio fills it only as far as the lines it is asked for reach, and
	// memory the program never writes is never given to it: a file of short
	// lines costs little, whatever the bound.
	return &exportReader{br: bufio.NewReaderSize(smallReads{r}, max+1), max: max}
}

// smallReads passes on reads of at most 64 KiB, so a large bufio buffer
// is filled a line at a time rather than whole by each read.
type smallReads struct{ r io.Reader }

func (s smallReads) Read(p []byte) (int, error) { return s.r.Read(p[:min(len(p), 64<<10)]) }

// rewind starts reading src again from where it is, keeping the buffer.
func (r *exportReader) rewind(src io.Reader) {
	r.br.Reset(smallReads{src})
	r.line = 0
}

// next returns the next message, skipping blank lines, or io.EOF after the
// last. Without withBody, the message is checked but has no body. The
// message does not share memory with the reader. Errors wrap ErrBadExport
// and name the line.
func (r *exportReader) next(withBody bool) (Message, error) {
	for {
		r.line++
		line, err := r.br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			err = fmt.Errorf("%w: longer than %d bytes", ErrLineTooLong, r.max)
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return Message{}, fmt.Errorf("%w: line %d: %w", ErrBadExport, r.line, err)
		}
		if trimmed := bytes.TrimSpace(line); len(trimmed) > 0 {
			var m Message
			if uerr := m.decode(trimmed, withBody); uerr != nil {
				return Message{}, fmt.Errorf("%w: line %d: %w", ErrBadExport, r.line, uerr)
			}
			return m, nil
		}
		if errors.Is(err, io.EOF) {
			return Message{}, io.EOF
		}
	}
}

// ImportOptions say where [Queue.Import] and [Queue.ImportFile] publish.
type ImportOptions struct {
	// To publishes to this queue instead of the dead-letter queue. Naming
	// it is also how an operator imports messages whose headers name
	// another origin queue (see [ErrForeignOrigin]).
	To string
	// DrainTimeout bounds the wait for the confirm of the message in
	// flight when ctx ends. Default [DefaultDrainTimeout].
	DrainTimeout time.Duration
	Progress     func(Progress)

	// MaxLineBytes bounds one line of the file [Queue.ImportFile] reads.
	// Default [MaxLineBytes].
	MaxLineBytes int
	// ImportID, if set, is written in every message published, as header
	// [HeaderImportID], so that [Queue.Imported] can tell later that this
	// import already happened. The command uses a hash of the file.
	ImportID string

	// Checked, if set, is called by [Queue.ImportFile] once every line of
	// the file has been checked, with the number of messages, before any
	// is published; an error from it ends the import with nothing
	// published (the command asks for confirmation here).
	Checked func(messages int) error
}

// Import publishes msgs, in order, to the dead-letter queue or opts.To,
// each with publisher confirms. Every message is checked before any is
// published: that it may go to the target, that the client can write it
// and a consumer's client read it back, and that the broker takes it (the
// message is sent to the broker under a routing key no queue has, which
// the broker checks and returns; nothing is stored). A refused message
// refuses the import, with an error wrapping [ErrUnpublishable] or
// [ErrForeignOrigin]. It stops at the first failure or when ctx ends (after the
// message in flight is confirmed or DrainTimeout passes); Result.Done says
// how many of msgs are now in the queue, so a caller can resume with
// msgs[Done:].
//
// Into a dead-letter queue (this one, or any whose name ends in ".dlq")
// messages go exactly as they are, headers included: that is where their
// history belongs. Into any other queue they go as [Queue.Replay] sends
// them: their failure record reset (error, class, attempts, failure times,
// RabbitMQ's x-death, through [dlq.StripDeaths]), the origin queue set to
// the one the dead-letter queue belongs to, and the replay count raised by
// one. The consumer trusts the history of such a delivery, so a message
// imported with its attempts spent would otherwise be dead-lettered again
// on its first failure, and one whose x-death names the queue it is
// imported into would be dropped by the broker on its first retry.
//
// Without opts.To, a message whose headers name an origin queue other than
// the one the dead-letter queue belongs to is refused before anything is
// published, with an error wrapping [ErrForeignOrigin]: in that DLQ the
// message would pass for one of its consumer's, though its headers, which
// anyone who wrote the file could set, say otherwise. Naming the target
// with opts.To is the operator saying the move is meant.
func (q *Queue) Import(ctx context.Context, msgs []Message, opts ImportOptions) (Result, error) {
	im := q.newImport(opts, len(msgs))
	defer im.close()
	for i := range msgs {
		if err := im.check(ctx, &msgs[i]); err != nil {
			return im.res, fmt.Errorf("import message %d (%s): %w", i+1, describe(&msgs[i]), err)
		}
	}
	if err := im.checkSizes(ctx); err != nil {
		return im.res, fmt.Errorf("import: %w", err)
	}
	if err := im.start(ctx); err != nil {
		return im.res, err
	}
	for i := range msgs {
		if err := im.publish(ctx, &msgs[i]); err != nil {
			return im.res, fmt.Errorf("import message %d (%s) to %q: %w", i+1, describe(&msgs[i]), im.target, err)
		}
	}
	return im.res, nil
}

// ImportFile publishes the messages of an export file, as [Queue.Import]
// does, holding one line of it in memory at a time: it reads src twice.
// The first pass checks every line (lines of at most opts.MaxLineBytes)
// and every message as Import does, and counts them, so a damaged file or
// a message the client or broker would refuse is refused whole, before
// anything is published; then opts.Checked is called. Memory holds the
// longest line and one decoded message, about twice the line. The second pass
// reads src again from the start and publishes each message as it is
// read. Both passes start where src stands when ImportFile is called.
// A file that changed between the passes stops the import there,
// with Result.Done messages published.
func (q *Queue) ImportFile(ctx context.Context, src io.ReadSeeker, opts ImportOptions) (Result, error) {
	im := q.newImport(opts, 0)
	defer im.close()
	start, err := src.Seek(0, io.SeekCurrent)
	if err != nil {
		return im.res, fmt.Errorf("import: %w", err)
	}
	checks := newExportReader(src, opts.MaxLineBytes)
	for {
		if err := ctx.Err(); err != nil {
			return im.res, err
		}
		m, err := checks.next(false)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return im.res, err
		}
		if err := im.check(ctx, &m); err != nil {
			return im.res, fmt.Errorf("import: line %d (%s): %w", checks.line, describe(&m), err)
		}
		im.res.Total++
	}
	if err := im.checkSizes(ctx); err != nil {
		return im.res, fmt.Errorf("import: %w", err)
	}
	if opts.Checked != nil {
		if err := opts.Checked(im.res.Total); err != nil {
			return im.res, err
		}
	}
	if _, err := src.Seek(start, io.SeekStart); err != nil {
		return im.res, fmt.Errorf("import: rewind the file: %w", err)
	}
	if err := im.start(ctx); err != nil {
		return im.res, err
	}
	lines := checks
	lines.rewind(src)
	for {
		m, err := lines.next(true)
		if errors.Is(err, io.EOF) {
			break
		}
		if err == nil && im.res.Done == im.res.Total {
			err = errors.New("more messages than when it was checked")
		}
		if err != nil {
			return im.res, fmt.Errorf("import: the file changed after it was checked: %w", err)
		}
		if err := im.publish(ctx, &m); err != nil {
			return im.res, fmt.Errorf("import: line %d (%s) to %q: %w", lines.line, describe(&m), im.target, err)
		}
	}
	if im.res.Done < im.res.Total {
		return im.res, fmt.Errorf("import: the file changed after it was checked: %d messages, not %d", im.res.Done, im.res.Total)
	}
	return im.res, nil
}

// importer publishes messages one after another into an import's target.
type importer struct {
	q      *Queue
	opts   ImportOptions
	target string
	toDLQ  bool
	pub    *amqpx.Publisher
	probe  *prober
	// maxBody is the largest body checked, which checkSizes sends; body is
	// that body when it is in memory.
	maxBody int
	body    []byte
	res     Result
}

func (q *Queue) newImport(opts ImportOptions, total int) *importer {
	target := cmp.Or(opts.To, q.name)
	return &importer{q: q, opts: opts, target: target, toDLQ: target == q.name || dlq.IsQueueName(target),
		probe: newProber(q.conn), res: Result{Progress: Progress{Total: total}}}
}

// check is the checking pass's look at m, before anything is published:
// whether it may go to the target (publishing), whether the client can
// write it and a consumer's client read it back (checkPublishable), and
// whether the broker takes it (a probe that stores nothing). What it
// passes, the publishing pass can publish: an import does not stop part
// way on a message the broker or the client refuses. (What can still stop
// it is what changes in between: the broker's limits, the target queue's
// room, the connection.)
func (im *importer) check(ctx context.Context, m *Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	p, err := im.publishing(m)
	if err != nil {
		return err
	}
	if err := checkPublishable(p, im.q.conn.Config.FrameSize); err != nil {
		return err
	}
	// The broker judges a body by its size alone, so the probe of each
	// message goes without it and one probe of the largest body, at the
	// end (checkSizes), stands for them all: memory holds no more bodies
	// than the import itself does.
	if size := max(len(p.Body), m.bodySize); size > im.maxBody {
		im.maxBody, im.body = size, p.Body
	}
	p.Body = nil
	return im.probe.check(ctx, p)
}

// checkSizes asks the broker whether it takes the largest body checked
// (max_message_size), once every message has been checked.
func (im *importer) checkSizes(ctx context.Context) error {
	if im.maxBody == 0 {
		return nil
	}
	body := im.body
	if len(body) != im.maxBody { // read from a file without its body: its size stands for it
		body = make([]byte, im.maxBody)
	}
	im.body = nil
	if err := im.probe.check(ctx, amqp.Publishing{Body: body}); err != nil {
		return fmt.Errorf("the largest body, of %d bytes: %w", im.maxBody, err)
	}
	return nil
}

// publishing is what m becomes in the import's target, or why it may not
// go there. Both passes call it for every message — the checking pass
// before anything is published, so one refused message refuses the whole
// import — making it the one place for a decision about a message.
func (im *importer) publishing(m *Message) (amqp.Publishing, error) {
	p := m.Publishing
	if im.opts.To == "" {
		if err := im.q.checkImportOrigin(m); err != nil {
			return p, err
		}
	}
	if !im.toDLQ {
		// Out of a dead-letter queue, a message's history must not follow
		// it: the consumer trusts the headers of a delivery from the
		// default exchange, so spent attempts would dead-letter it again
		// on its first failure. Reset exactly as a replay does.
		p = replayPublishing(m, im.q.consumer, im.q.conn.Config.FrameSize)
	}
	if im.opts.ImportID != "" {
		h := make(amqp.Table, len(p.Headers)+1)
		maps.Copy(h, p.Headers) // m's own headers stay as read
		h[HeaderImportID] = im.opts.ImportID
		p.Headers = h
	}
	return p, nil
}

// HeaderImportID names, on a message an import published, the import it
// came from ([ImportOptions].ImportID).
const HeaderImportID = "x-warren-import-id"

// Imported reports whether queue holds a message published by the import
// id ([HeaderImportID]). It reads queue as the dead-letter queue is read:
// nothing is removed, every message is handed back in its place. It cannot
// see messages a consumer already took from queue.
func (q *Queue) Imported(ctx context.Context, queue, id string) (bool, error) {
	target := &Queue{conn: q.conn, name: queue, consumer: q.consumer}
	found := false
	err := target.scan(ctx, 0, &Progress{}, nil, func(_ *amqp.Delivery, m *Message) (bool, error) {
		v, _ := m.Headers[HeaderImportID].(string)
		found = v == id
		return !found, nil
	})
	return found, err
}

// start checks that the target exists and opens the publisher.
func (im *importer) start(ctx context.Context) error {
	im.probe.close() // the checking is over
	if _, err := im.q.depth(ctx, im.target); err != nil {
		return fmt.Errorf("import target: %w", err)
	}
	var err error
	im.pub, err = amqpx.NewPublisher(ctx, im.q.conn, 1)
	return err
}

func (im *importer) close() {
	im.probe.close()
	if im.pub != nil {
		im.pub.Close()
	}
}

// publish publishes m and waits for the broker's confirm; only then does
// it count m done.
func (im *importer) publish(ctx context.Context, m *Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	im.res.Scanned++
	im.res.Matched++
	p, err := im.publishing(m)
	if err != nil {
		return err
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cmp.Or(im.opts.DrainTimeout, DefaultDrainTimeout))
	err = im.pub.Publish(pctx, "", im.target, p)
	cancel()
	if err != nil {
		return err
	}
	im.res.Done++
	if im.res.Queues == nil {
		im.res.Queues = map[string]int{}
	}
	im.res.Queues[im.target]++
	if im.opts.Progress != nil {
		im.opts.Progress(im.res.Progress)
	}
	return nil
}

// ErrForeignOrigin is wrapped by the error of an import, without a target
// queue, of a message whose headers name an origin queue other than the
// one the dead-letter queue belongs to.
var ErrForeignOrigin = errors.New("message names another origin queue")

// checkImportOrigin refuses m for an import into q without a target queue
// named when m's headers say it failed in another consumer's queue. A
// message that names no origin is accepted: it claims nothing.
func (q *Queue) checkImportOrigin(m *Message) error {
	if origin := m.Origin(); origin != "" && !q.isHome(origin) {
		return fmt.Errorf("%w: its headers name %q, and %s belongs to %q; name the target queue (--to) to import it anyway", ErrForeignOrigin, origin, q.name, q.consumer)
	}
	return nil
}
