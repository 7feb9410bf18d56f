package contract

import (
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/invopop/jsonschema"
)

// Contract is the schema of one event type's payload data at one version.
type Contract struct {
	// Type is the event type ("workitem.updated").
	Type string
	// Version is the envelope's version ("1.0"; warren.Event.Version).
	Version string
	// Schema is a JSON Schema, draft 2020-12, of payload.data.
	Schema json.RawMessage
}

// Key is how a contract is named: "workitem.updated@1.0".
func (c Contract) Key() string { return key(c.Type, c.Version) }

func key(eventType, version string) string { return eventType + "@" + version }

// Draft2020 is the $schema of every contract [Of] makes.
const Draft2020 = "https://json-schema.org/draft/2020-12/schema"

// Of derives the contract of eventType at version from T, the Go type a
// handler takes (warren.Typed) or a producer fills: an object with T's
// exported fields under their json names, each field without omitempty
// required, other members allowed (a consumer ignores what it does not
// know, so adding an optional field breaks no one). The jsonschema struct
// tag refines a field (`jsonschema:"enum=a,enum=b"`, minimum=, format=,
// …; see github.com/invopop/jsonschema).
func Of[T any](eventType, version string) (Contract, error) {
	if err := checkName(eventType, version); err != nil {
		return Contract{}, err
	}
	t := reflect.TypeFor[T]()
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct && t.Kind() != reflect.Map {
		return Contract{}, fmt.Errorf("contract %s: payload data must be a JSON object; %s is a %s", key(eventType, version), t, t.Kind())
	}
	// Nested named types go to $defs and are referred to ($ref), so
	// that a type that contains itself (a tree) has a finite schema. The
	// root is written out in place, and kept in $defs too for the
	// references a recursive type makes to itself.
	r := &jsonschema.Reflector{
		AllowAdditionalProperties: true,
		ExpandedStruct:            t.Name() == "",
		// Two packages' State types are two definitions.
		Namer:  defName,
		Mapper: asEncoded,
	}
	s := r.ReflectFromType(t)
	if name, ok := strings.CutPrefix(s.Ref, "#/$defs/"); ok && s.Definitions[name] != nil {
		root := *s.Definitions[name]
		root.Definitions = s.Definitions
		s = &root
	}
	s.Version = Draft2020
	s.ID = ""
	s.Title = key(eventType, version)
	b, err := json.Marshal(s)
	if err != nil {
		return Contract{}, fmt.Errorf("contract %s: %w", key(eventType, version), err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		return Contract{}, fmt.Errorf("contract %s: %w", key(eventType, version), err)
	}
	allowNulls(doc, doc, t, r.Namer)
	if defs, ok := doc["$defs"].(map[string]any); ok {
		for _, dt := range namedTypes(t) {
			if def, ok := defs[r.Namer(dt)].(map[string]any); ok {
				allowNulls(doc, def, dt, r.Namer)
			}
		}
	}
	pruneDefs(doc)
	b, err = json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return Contract{}, fmt.Errorf("contract %s: %w", key(eventType, version), err)
	}
	return Contract{Type: eventType, Version: version, Schema: b}, nil
}

// pruneDefs drops the definitions nothing refers to: the reflector defines
// the root type in $defs as well as inlining it, and a contract committed
// to a repository should read as what it checks. A recursive type keeps
// its definition, which the root's properties refer to.
func pruneDefs(doc map[string]any) {
	defs, _ := doc["$defs"].(map[string]any)
	if defs == nil {
		return
	}
	used := map[string]bool{}
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if ref, ok := x.(string); ok && k == "$ref" {
					if name, ok := strings.CutPrefix(ref, "#/$defs/"); ok && !used[name] {
						used[name] = true
						walk(defs[name])
					}
					continue
				}
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	delete(doc, "$defs")
	walk(doc)
	for name := range defs {
		if !used[name] {
			delete(defs, name)
		}
	}
	if len(defs) > 0 {
		doc["$defs"] = defs
	}
}

// defName names a named type's definition by its package path too: two
// packages' State types are two definitions. An unnamed type has none
// (it is written out where it is used).
func defName(t reflect.Type) string {
	if t.Name() == "" {
		return ""
	}
	return strings.ReplaceAll(t.PkgPath(), "/", ".") + "." + t.Name()
}

var (
	jsonMarshaler = reflect.TypeFor[json.Marshaler]()
	textMarshaler = reflect.TypeFor[encoding.TextMarshaler]()
)

// asEncoded gives the schema of what encoding/json writes for the types
// whose encoding is not their fields': a json.Number is a number, a type
// with its own MarshalText a string, one with its own MarshalJSON
// anything (its encoding is its own), a sized integer its range. Other
// types are left to the reflector (time.Time is its date-time string).
func asEncoded(t reflect.Type) *jsonschema.Schema {
	switch {
	case t == reflect.TypeFor[json.Number]():
		return &jsonschema.Schema{Type: "number"}
	case t == reflect.TypeFor[time.Time]():
		return nil
	case t.Implements(jsonMarshaler) || reflect.PointerTo(t).Implements(jsonMarshaler):
		return &jsonschema.Schema{}
	case t.Implements(textMarshaler) || reflect.PointerTo(t).Implements(textMarshaler):
		return &jsonschema.Schema{Type: "string"}
	}
	bounds := map[reflect.Kind][2]float64{
		reflect.Int8: {math.MinInt8, math.MaxInt8}, reflect.Int16: {math.MinInt16, math.MaxInt16}, reflect.Int32: {math.MinInt32, math.MaxInt32},
		reflect.Uint8: {0, math.MaxUint8}, reflect.Uint16: {0, math.MaxUint16}, reflect.Uint32: {0, math.MaxUint32},
	}
	if b, ok := bounds[t.Kind()]; ok && t.Name() == t.Kind().String() {
		return &jsonschema.Schema{Type: "integer", Minimum: json.Number(strconv.FormatFloat(b[0], 'f', -1, 64)), Maximum: json.Number(strconv.FormatFloat(b[1], 'f', -1, 64))}
	}
	return nil
}

// allowNulls lets each property of schema (t's) take null where
// encoding/json writes null for t's field: a nil pointer, slice, map or
// interface without omitempty. A property that refers to a definition
// becomes anyOf that and null, which Compare reads as nullable.
func allowNulls(root, schema map[string]any, t reflect.Type, namer func(reflect.Type) string) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	props, _ := schema["properties"].(map[string]any)
	if t.Kind() != reflect.Struct || props == nil {
		return
	}
	for _, f := range reflect.VisibleFields(t) {
		if !f.IsExported() || f.Anonymous && f.Type.Kind() == reflect.Struct {
			continue
		}
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" && opts == "" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		p, ok := props[name].(map[string]any)
		if !ok {
			continue
		}
		switch f.Type.Kind() {
		case reflect.Pointer, reflect.Slice, reflect.Map, reflect.Interface:
		default:
			continue
		}
		if f.Type.Kind() == reflect.Interface {
			continue // any value already
		}
		if typ, ok := p["type"].(string); ok {
			p["type"] = []any{typ, "null"}
		} else if _, ok := p["$ref"]; ok {
			props[name] = map[string]any{"anyOf": []any{p, map[string]any{"type": "null"}}}
		}
	}
}

// namedTypes returns the named struct types t refers to, t's own
// included: those the reflector puts in $defs.
func namedTypes(t reflect.Type) []reflect.Type {
	var out []reflect.Type
	seen := map[reflect.Type]bool{}
	var walk func(reflect.Type)
	walk = func(t reflect.Type) {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array || t.Kind() == reflect.Map {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct || seen[t] {
			return
		}
		seen[t] = true
		if t.Name() != "" {
			out = append(out, t)
		}
		for _, f := range reflect.VisibleFields(t) {
			if f.IsExported() {
				walk(f.Type)
			}
		}
	}
	walk(t)
	return out
}

// MustOf is Of for package-level declarations: it panics on an error.
func MustOf[T any](eventType, version string) Contract {
	c, err := Of[T](eventType, version)
	if err != nil {
		panic(err)
	}
	return c
}

// checkName refuses a type or version that cannot name a contract file.
func checkName(eventType, version string) error {
	for _, f := range []struct{ name, value string }{{"event type", eventType}, {"version", version}} {
		switch {
		case f.value == "":
			return fmt.Errorf("contract: the %s is empty", f.name)
		case f.value == "." || f.value == ".." || strings.ContainsAny(f.value, "/\\@:*?\"<>|") || strings.TrimSpace(f.value) != f.value ||
			strings.ContainsFunc(f.value, unicode.IsControl) || !utf8.ValidString(f.value):
			return fmt.Errorf("contract: the %s %q cannot name a contract file (no /, \\, @, :, *, ?, \", <, >, |, control characters, surrounding spaces, . or ..)", f.name, f.value)
		}
	}
	return nil
}

// ErrNoContract is matched by the error of [Set.Check] for an event whose
// type and version have no contract in the set.
var ErrNoContract = errors.New("no contract")
