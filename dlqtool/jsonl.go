package dlqtool

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/dlq"
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

// ErrBadExport is wrapped by every error [ReadMessages] returns for a line
// that is not a message.
var ErrBadExport = errors.New("invalid export")

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
	Contract         string      `json:"contract,omitempty"`
	Field            string      `json:"field,omitempty"`
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
			Class: md.Class, Error: md.Error, Contract: md.Contract, Field: md.Field, Attempts: md.Attempts,
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
	if !keep && (encoding == "" || encoding == "text") && len(raw) > 1 && raw[0] == '"' {
		// Valid JSON (the line parsed): its text's length is counted
		// without making the text, which for a body that is itself JSON
		// (escaped quotes) would cost its size in garbage on the checking
		// pass, beside the probe of the largest body.
		return nil, unquotedLen(raw), nil
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

// unquotedLen is the length of the text encoding/json unquotes the valid
// JSON string raw into: escapes as what they stand for, a \u escape that
// is no character (a lone surrogate) and each byte that is not UTF-8 as
// U+FFFD.
func unquotedLen(raw rawValue) int {
	raw = bytes.TrimSpace(raw)
	s := raw[1 : len(raw)-1]
	n := 0
	for i := 0; i < len(s); {
		switch c := s[i]; {
		case c == '\\' && s[i+1] == 'u':
			r := hex4(s[i+2 : i+6])
			i += 6
			if utf16.IsSurrogate(r) {
				if i+6 <= len(s) && s[i] == '\\' && s[i+1] == 'u' {
					if pair := utf16.DecodeRune(r, hex4(s[i+2:i+6])); pair != utf8.RuneError {
						n += utf8.RuneLen(pair)
						i += 6
						continue
					}
				}
				r = utf8.RuneError
			}
			n += utf8.RuneLen(r)
		case c == '\\':
			n++
			i += 2
		case c < utf8.RuneSelf:
			n++
			i++
		default:
			r, size := utf8.DecodeRune(s[i:])
			if r == utf8.RuneError && size == 1 {
				n += utf8.RuneLen(utf8.RuneError)
			} else {
				n += size
			}
			i += size
		}
	}
	return n
}

// hex4 is the value of four hex digits (valid: the line parsed).
func hex4(b []byte) rune {
	var r rune
	for _, c := range b {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		default:
			c = c - 'A' + 10
		}
		r = r<<4 | rune(c)
	}
	return r
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
