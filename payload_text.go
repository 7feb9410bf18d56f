package warren

import (
	"bytes"
	"cmp"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
)

// decodeRaw decodes one payload part into v, taking Plane's text where a
// plain decode fails on it (see Payload.DecodePreviousAttributes): first
// the part itself as the JSON its text holds, then, in one pass, every
// top-level member written as text where v's field of that name (or v's
// map values) wants a number, a boolean, an array or an object.
func decodeRaw(field string, raw json.RawMessage, v any) error {
	if len(raw) == 0 {
		return &DataError{Path: field, msg: field + " is missing"}
	}
	// A decode that failed may have filled part of v: each further one
	// starts from v as it was, so that v is what one decode makes of
	// what is read (a custom UnmarshalJSON runs once on it, a map holds
	// no member of a failed try).
	before := reflect.ValueOf(v)
	var saved reflect.Value
	if before.Kind() == reflect.Pointer && !before.IsNil() {
		saved = reflect.New(before.Elem().Type()).Elem()
		saved.Set(before.Elem())
	}
	retry := func(raw json.RawMessage) error {
		if saved.IsValid() {
			before.Elem().Set(saved)
		}
		return json.Unmarshal(raw, v)
	}
	err := json.Unmarshal(raw, v)
	if err != nil {
		if inner, ok := textJSON(raw); ok {
			raw, err = inner, retry(inner)
		}
	}
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) && typeErr.Value == "string" {
		if members, ok := membersFromText(raw, reflect.TypeOf(v)); ok {
			err = retry(members)
		}
	}
	if err != nil {
		path := field
		if errors.As(err, &typeErr) && typeErr.Field != "" {
			path += "." + typeErr.Field
		}
		return &DataError{Path: path, msg: fmt.Sprintf("%s: %v", field, err), err: err}
	}
	return nil
}

// isNullPart is true for a payload part that is absent or JSON null.
func isNullPart(raw json.RawMessage) bool {
	return len(raw) == 0 || string(bytes.TrimSpace(raw)) == "null"
}

// DataError is a payload part (payload.data, payload.previous_attributes)
// that does not decode into the value asked for. It matches
// [ErrInvalidEvent].
type DataError struct {
	// Path is the part and, when the decoder could tell, the path of
	// the object member that failed in it: "payload.data.state.order"
	// (array indices and map keys are not named; a custom
	// UnmarshalJSON's failure is the part's).
	Path string
	msg  string
	err  error
}

func (e *DataError) Error() string { return "invalid event: " + e.msg }

// FailedField returns the field that failed; a decode names no contract.
func (e *DataError) FailedField() (contract, path string) { return "", e.Path }
func (e *DataError) Is(target error) bool                 { return target == ErrInvalidEvent }
func (e *DataError) Unwrap() error                        { return e.err }

// membersFromText returns the object raw with each member that t (a
// pointer to the decode's target) wants as other than a string, and that
// is written as text holding such JSON, replaced by that JSON. The
// members keep their order, duplicates included, so the decode picks the
// same one as before. It reports false when nothing was replaced.
func membersFromText(raw json.RawMessage, t reflect.Type) (json.RawMessage, bool) {
	wants, all := nonStringMembers(t)
	if !all && len(wants) == 0 {
		return nil, false
	}
	out := []byte{'{'}
	replaced := false
	err := eachField("payload", raw, func(key, value []byte) error {
		if len(out) > 1 {
			out = append(out, ',')
		}
		quoted, err := json.Marshal(string(key))
		if err != nil {
			return err
		}
		out = append(append(out, quoted...), ':')
		if all || wants[strings.ToLower(string(key))] {
			if inner, ok := textJSON(value); ok {
				value, replaced = inner, true
			}
		}
		out = append(out, value...)
		return nil
	})
	if err != nil || !replaced {
		return nil, false
	}
	return append(out, '}'), true
}

var (
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// nonStringMembers returns the JSON names (lower-cased: encoding/json
// matches names regardless of case) of the fields of t's struct, embedded
// structs' included, whose values are not strings; or all, when t is a map
// whose values are not strings.
func nonStringMembers(t reflect.Type) (names map[string]bool, all bool) {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t == nil:
		return nil, false
	case t.Kind() == reflect.Map:
		return nil, wantsNonString(t.Elem())
	case t.Kind() != reflect.Struct:
		return nil, false
	}
	names = map[string]bool{}
	addStructFields(t, names, 0)
	return names, false
}

func addStructFields(t reflect.Type, names map[string]bool, depth int) {
	if depth > 8 { // embedding that deep is a cycle through pointers
		return
	}
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if f.Anonymous && name == "" && ft.Kind() == reflect.Struct {
			addStructFields(ft, names, depth+1) // promoted fields
			continue
		}
		if !f.IsExported() || strings.Contains(opts, "string") {
			continue // not decoded, or ",string": text is what it wants
		}
		if wantsNonString(f.Type) {
			names[strings.ToLower(cmp.Or(name, f.Name))] = true
		}
	}
}

// wantsNonString reports whether a value of type t decodes from JSON other
// than a string: numbers, booleans, arrays (but []byte, which is base64
// text), maps and plain structs. Types that decode themselves are left as
// they are: a time.Time, for one, wants its text.
func wantsNonString(t reflect.Type) bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(jsonUnmarshaler) || reflect.PointerTo(t).Implements(textUnmarshaler) {
		return false
	}
	switch t.Kind() {
	case reflect.String, reflect.Interface:
		return false
	case reflect.Slice:
		return t.Elem().Kind() != reflect.Uint8
	}
	return true
}

// textJSON returns the JSON value a JSON string's text holds, if its text
// is valid JSON other than a string.
func textJSON(raw json.RawMessage) (json.RawMessage, bool) {
	var text string
	if json.Unmarshal(raw, &text) != nil {
		return nil, false
	}
	inner := json.RawMessage(strings.Trim(text, " \t\r\n"))
	if len(inner) == 0 || inner[0] == '"' || !json.Valid(inner) {
		return nil, false
	}
	return inner, true
}
