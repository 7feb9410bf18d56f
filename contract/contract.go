package contract

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"

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
	r := &jsonschema.Reflector{AllowAdditionalProperties: true, ExpandedStruct: t.Name() == ""}
	s := r.ReflectFromType(t)
	if name, ok := strings.CutPrefix(s.Ref, "#/$defs/"); ok && s.Definitions[name] != nil {
		root := *s.Definitions[name]
		root.Definitions = s.Definitions
		s = &root
	}
	s.Version = Draft2020
	s.ID = ""
	s.Title = key(eventType, version)
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return Contract{}, fmt.Errorf("contract %s: %w", key(eventType, version), err)
	}
	return Contract{Type: eventType, Version: version, Schema: b}, nil
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
		case f.value == "." || f.value == ".." || strings.ContainsAny(f.value, "/\\@\x00") || strings.TrimSpace(f.value) != f.value:
			return fmt.Errorf("contract: the %s %q cannot name a contract (no /, \\, @, NUL, surrounding spaces, . or ..)", f.name, f.value)
		}
	}
	return nil
}

// ErrNoContract is matched by the error of [Set.Check] for an event whose
// type and version have no contract in the set.
var ErrNoContract = errors.New("no contract")
