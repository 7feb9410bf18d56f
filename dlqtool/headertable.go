package dlqtool

// Header tables in JSON: every AMQP field type written so that it reads
// back as the same type and value.

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"
)

// maxNesting bounds how deep arrays and tables in a header may nest.
const maxNesting = 64

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
