package cloudevents

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"time"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"
)

// kind is the CloudEvents type of an attribute value as it arrived: a
// header's AMQP type or a JSON member's type. URI and URI-reference
// values arrive as strings.
type kind uint8

const (
	kString kind = iota + 1
	kBool
	kInteger
	kTimestamp // an AMQP timestamp header
	kBinary    // an AMQP byte array header
)

func (k kind) String() string {
	switch k {
	case kString:
		return "a String"
	case kBool:
		return "a Boolean"
	case kInteger:
		return "an Integer"
	case kTimestamp:
		return "a Timestamp"
	case kBinary:
		return "Binary"
	}
	return "nothing"
}

// value is one attribute's value.
type value struct {
	kind kind
	s    string // kString
	b    bool   // kBool
	i    int32  // kInteger
	t    time.Time
	bin  []byte
}

// canonical is the value's canonical string encoding (CloudEvents
// v1.0.2, "Type System").
func (v value) canonical() string {
	switch v.kind {
	case kBool:
		return strconv.FormatBool(v.b)
	case kInteger:
		return strconv.FormatInt(int64(v.i), 10)
	case kTimestamp:
		return v.t.UTC().Format(time.RFC3339Nano)
	case kBinary:
		return base64.StdEncoding.EncodeToString(v.bin)
	}
	return v.s
}

// headerValue reads one header of a binary-mode message. ok is false for
// a void (nil) value, which counts as unset, as a JSON null does.
func headerValue(v any) (val value, ok bool, err error) {
	switch v := v.(type) {
	case nil:
		return value{}, false, nil
	case string:
		return value{kind: kString, s: v}, true, nil
	case bool:
		return value{kind: kBool, b: v}, true, nil
	case time.Time:
		return value{kind: kTimestamp, t: v.UTC()}, true, nil
	case []byte:
		return value{kind: kBinary, bin: v}, true, nil
	case int8:
		return integer(int64(v))
	case int16:
		return integer(int64(v))
	case int32:
		return integer(int64(v))
	case int64:
		return integer(v)
	case int:
		return integer(int64(v))
	case uint8:
		return integer(int64(v))
	case uint16:
		return integer(int64(v))
	case uint32:
		return integer(int64(v))
	case uint64:
		if v > math.MaxInt32 {
			return value{}, false, fmt.Errorf("the integer %d is outside a CloudEvents Integer's range (32 bits)", v)
		}
		return integer(int64(v))
	}
	return value{}, false, fmt.Errorf("%s is not a CloudEvents type", amqpType(v))
}

func integer(n int64) (value, bool, error) {
	if n < math.MinInt32 || n > math.MaxInt32 {
		return value{}, false, fmt.Errorf("the integer %d is outside a CloudEvents Integer's range (32 bits)", n)
	}
	return value{kind: kInteger, i: int32(n)}, true, nil
}

// amqpType names the Go type amqp091-go gives a header value, in AMQP's
// words where they differ.
func amqpType(v any) string {
	switch v.(type) {
	case float32, float64:
		return "a floating-point number"
	case amqp.Table, map[string]any:
		return "a table"
	case []any:
		return "an array"
	case amqp.Decimal:
		return "a decimal"
	}
	return fmt.Sprintf("a value of type %T", v)
}

// jsonValue reads one member of a structured body: raw is valid JSON.
// ok is false for null, which the JSON format reads as unset.
func jsonValue(raw []byte) (val value, ok bool, err error) {
	raw = bytes.TrimSpace(raw)
	switch raw[0] {
	case 'n':
		return value{}, false, nil
	case 't', 'f':
		return value{kind: kBool, b: raw[0] == 't'}, true, nil
	case '"':
		if err := checkSurrogates(raw); err != nil {
			return value{}, false, err
		}
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return value{}, false, err
		}
		return value{kind: kString, s: s}, true, nil
	case '{':
		return value{}, false, fmt.Errorf("a JSON object is not a CloudEvents type")
	case '[':
		return value{}, false, fmt.Errorf("a JSON array is not a CloudEvents type")
	}
	// A number: the JSON format allows only an integer component,
	// optionally with a minus sign, in 32 bits.
	if !canonicalInteger(raw, true) {
		return value{}, false, fmt.Errorf("the number %.40s is not a CloudEvents Integer (a whole number without fraction or exponent)", raw)
	}
	n, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil {
		return value{}, false, fmt.Errorf("the integer %.40s is outside a CloudEvents Integer's range (32 bits)", raw)
	}
	return integer(n)
}

// canonicalInteger reports whether raw is a JSON integer as strconv
// writes it: -?(0|[1-9][0-9]*), with "-0" only when allowNegZero (the
// JSON format permits it on input; it does not write back the same).
func canonicalInteger(raw []byte, allowNegZero bool) bool {
	s := raw
	if len(s) > 0 && s[0] == '-' {
		s = s[1:]
		if !allowNegZero && len(s) == 1 && s[0] == '0' {
			return false
		}
	}
	if len(s) == 0 || len(s) > 11 || (s[0] == '0' && len(s) > 1) {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// checkSurrogates refuses a JSON string whose \u escapes hold a
// surrogate that is not part of a pair: encoding/json would read it as
// U+FFFD, and the specification forbids it in a String.
func checkSurrogates(raw []byte) error {
	for i := 0; i+5 < len(raw); i++ {
		if raw[i] != '\\' {
			continue
		}
		if raw[i+1] != 'u' {
			i++ // \\, \", \n: the next byte is escaped
			continue
		}
		r, err := strconv.ParseUint(string(raw[i+2:i+6]), 16, 32)
		if err != nil {
			return fmt.Errorf("bad \\u escape")
		}
		switch {
		case r >= 0xD800 && r <= 0xDBFF:
			if i+11 >= len(raw) || raw[i+6] != '\\' || raw[i+7] != 'u' {
				return fmt.Errorf("an unpaired surrogate (\\u%04X) is not allowed in a CloudEvents String", r)
			}
			lo, err := strconv.ParseUint(string(raw[i+8:i+12]), 16, 32)
			if err != nil || lo < 0xDC00 || lo > 0xDFFF {
				return fmt.Errorf("an unpaired surrogate (\\u%04X) is not allowed in a CloudEvents String", r)
			}
			i += 11
		case r >= 0xDC00 && r <= 0xDFFF:
			return fmt.Errorf("an unpaired surrogate (\\u%04X) is not allowed in a CloudEvents String", r)
		default:
			i += 5
		}
	}
	return nil
}

// checkString reports why s cannot be a CloudEvents String: it is not
// UTF-8, or holds a control character (U+0000–U+001F, U+007F–U+009F) or
// a noncharacter (U+FDD0–U+FDEF, U+xxFFFE, U+xxFFFF).
func checkString(s string) error {
	if !utf8.ValidString(s) {
		return fmt.Errorf("it is not valid UTF-8")
	}
	for i, r := range s {
		switch {
		case r < 0x20 || (r >= 0x7f && r <= 0x9f):
			return fmt.Errorf("it holds a control character (%U at byte %d)", r, i)
		case (r >= 0xFDD0 && r <= 0xFDEF) || r&0xFFFE == 0xFFFE:
			return fmt.Errorf("it holds a noncharacter (%U at byte %d)", r, i)
		}
	}
	return nil
}

// parseTime reads an RFC 3339 date-time, as the specification's
// Timestamp is: its grammar exactly (a "T" and "Z" in either case, a
// fraction of any length, an offset of at most 23:59), which is
// narrower than time.Parse's (a comma before the fraction, an offset of
// 24:00) and wider in two places: a fraction past nanoseconds is
// truncated, and a leap second (second 60 of minute 59, in any offset)
// reads as the last nanosecond before the next minute, since a
// time.Time cannot hold it. The result is in UTC, as warren writes it.
func parseTime(s string) (time.Time, error) {
	b := []byte(s)
	bad := func() (time.Time, error) {
		return time.Time{}, fmt.Errorf("%.64q is not an RFC 3339 date-time", s)
	}
	// date-time = full-date "T" partial-time time-offset
	if len(b) < 20 || !digits(b, 0, 4) || b[4] != '-' || !digits(b, 5, 7) || b[7] != '-' || !digits(b, 8, 10) ||
		(b[10] != 'T' && b[10] != 't') || !digits(b, 11, 13) || b[13] != ':' || !digits(b, 14, 16) || b[16] != ':' || !digits(b, 17, 19) {
		return bad()
	}
	b[10] = 'T'
	i := 19
	if b[i] == '.' {
		j := i + 1
		for j < len(b) && b[j] >= '0' && b[j] <= '9' {
			j++
		}
		if j == i+1 {
			return bad()
		}
		i = j
	}
	switch rest := b[i:]; {
	case len(rest) == 1 && (rest[0] == 'Z' || rest[0] == 'z'):
		b[i] = 'Z'
	case len(rest) == 6 && (rest[0] == '+' || rest[0] == '-') && digits(rest, 1, 3) && rest[3] == ':' && digits(rest, 4, 6):
		if h, m := num(rest, 1, 3), num(rest, 4, 6); h > 23 || m > 59 {
			return bad()
		}
	default:
		return bad()
	}
	leap := num(b, 17, 19) == 60
	if leap {
		if num(b, 14, 16) != 59 {
			return time.Time{}, fmt.Errorf("%.64q: second 60 is a leap second, which only minute 59 has", s)
		}
		b[17], b[18] = '5', '9'
	}
	t, err := time.Parse(time.RFC3339Nano, string(b))
	if err != nil {
		return time.Time{}, fmt.Errorf("%.64q is not a valid date-time: %v", s, err)
	}
	if leap {
		t = t.Truncate(time.Second).Add(time.Second - 1)
	}
	return t.UTC(), nil
}

func digits(b []byte, from, to int) bool {
	if to > len(b) {
		return false
	}
	for _, c := range b[from:to] {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

func num(b []byte, from, to int) int {
	n := 0
	for _, c := range b[from:to] {
		n = n*10 + int(c-'0')
	}
	return n
}

// formatTime writes t as the codec does: RFC 3339 in UTC with the
// nanoseconds that are not zero, as warren's envelope writes created_at.
func formatTime(t time.Time) (string, error) {
	u := t.UTC()
	if y := u.Year(); y < 0 || y > 9999 {
		return "", fmt.Errorf("the year %d is outside RFC 3339's range (0000-9999)", y)
	}
	return u.Format(time.RFC3339Nano), nil
}

// appendJSONString appends s as a JSON string, leaving <, > and & as they
// are (a body is not HTML).
func appendJSONString(buf []byte, s string) []byte {
	plain := true
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			plain = false
			break
		}
	}
	if plain {
		buf = append(buf, '"')
		buf = append(buf, s...)
		return append(buf, '"')
	}
	var w bytes.Buffer
	enc := json.NewEncoder(&w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return append(buf, bytes.TrimSuffix(w.Bytes(), []byte("\n"))...)
}
