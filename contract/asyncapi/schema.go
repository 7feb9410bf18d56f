package asyncapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/warrenmq/warren/contract"
)

// schemaMaps are the keywords whose value is an object of schemas, by
// name; schemaOne those whose value is one schema; schemaList those whose
// value is an array of schemas. Both draft-07 and 2020-12 read them so
// (items as an array is draft-07's tuple form, which a 2020-12 contract
// cannot have: NewSet refuses it).
var (
	schemaMaps = []string{"properties", "patternProperties", "$defs", "definitions"}
	schemaOne  = []string{"items", "additionalProperties", "additionalItems", "not", "if", "then", "else", "contains", "propertyNames"}
	schemaList = []string{"allOf", "anyOf", "oneOf"}
)

// unportable are the 2020-12 keywords AsyncAPI's Schema Object (draft-07)
// does not have, or reads otherwise: a contract using one would be
// described as something it is not, so it is refused.
var unportable = map[string]string{
	"$id":                   "draft-07 resolves $refs below it against another base",
	"$anchor":               "draft-07 has no anchors",
	"$dynamicAnchor":        "draft-07 has no dynamic references",
	"$dynamicRef":           "draft-07 has no dynamic references",
	"$recursiveAnchor":      "draft-07 has no recursive references",
	"$recursiveRef":         "draft-07 has no recursive references",
	"$vocabulary":           "draft-07 has no vocabularies",
	"prefixItems":           "draft-07 ignores it (its tuples are items as an array)",
	"unevaluatedProperties": "draft-07 ignores it",
	"unevaluatedItems":      "draft-07 ignores it",
	"dependentRequired":     "draft-07 ignores it (its form is dependencies)",
	"dependentSchemas":      "draft-07 ignores it (its form is dependencies)",
	"minContains":           "draft-07 ignores it",
	"maxContains":           "draft-07 ignores it",
	"contentSchema":         "draft-07 ignores it",
	// The other way: 2020-12 ignores it, draft-07 applies it.
	"dependencies": "2020-12 ignores it (its forms are dependentRequired and dependentSchemas), where draft-07 applies it",
	// AsyncAPI's Schema Object gives these a meaning and a form of its
	// own; in a 2020-12 contract they are annotations.
	"discriminator": "AsyncAPI's Schema Object reads it as the property that tells subtypes apart",
	"externalDocs":  "AsyncAPI's Schema Object reads it as a link to documentation, of its own form",
}

// UnportableError is a contract that cannot be written in AsyncAPI's
// Schema Object without changing what it means.
type UnportableError struct {
	Contract string // "workitem.updated@1.0"
	Path     string // where in the schema, as a JSON pointer ("/properties/a/$ref")
	Reason   string
}

func (e *UnportableError) Error() string {
	return fmt.Sprintf("asyncapi: contract %s: at %s: %s", e.Contract, cmpOr(e.Path, "the root"), e.Reason)
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// placeSchema returns c's schema as it stands in the document at
// #/components/schemas/<id>: its $schema left out (the place says the
// dialect), its $refs pointing into the document, and a $ref with
// siblings wrapped in allOf.
func placeSchema(c contract.Contract, id string) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(c.Schema))
	dec.UseNumber() // numbers as written: 1.0 stays 1.0, big integers stay exact
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("asyncapi: contract %s: %w", c.Key(), err)
	}
	p := placer{contract: c.Key(), base: "#/components/schemas/" + id}
	root, ok := doc.(map[string]any)
	if ok {
		p.rootID, _ = root["$id"].(string)
	}
	if !ok {
		// true and false are schemas, but AsyncAPI takes only an object
		// as a component's schema: the object forms say the same.
		if b, isBool := doc.(bool); isBool && b {
			return map[string]any{}, nil
		} else if isBool {
			return map[string]any{"not": map[string]any{}}, nil
		}
		return nil, p.refuse("", "a schema is an object or a boolean")
	}
	delete(root, "$schema")
	// A root $id only names the document: the refs are rewritten to
	// point into the AsyncAPI document, which the name would not change.
	delete(root, "$id")
	// AsyncAPI reads a schema with a member "schema" as a Multi Format
	// Schema Object, whose "schema" is the schema.
	if _, ok := root["schema"]; ok {
		return nil, p.refuse("/schema", `AsyncAPI takes a schema with a member "schema" for a Multi Format Schema Object`)
	}
	out, err := p.schema(root, "")
	if err != nil {
		return nil, err
	}
	return out, nil
}

// placer rewrites one contract's schema for its place in the document.
type placer struct {
	contract string
	base     string // the schema's place: #/components/schemas/<id>
	rootID   string // the contract's own $id, which its $refs may name it by
}

func (p placer) refuse(path, reason string) error {
	return &UnportableError{Contract: p.contract, Path: path, Reason: reason}
}

// schema rewrites v, a schema at path.
func (p placer) schema(v any, path string) (any, error) {
	m, ok := v.(map[string]any)
	if !ok {
		if _, isBool := v.(bool); isBool {
			return v, nil
		}
		return nil, p.refuse(path, fmt.Sprintf("a schema is an object or a boolean, not %s", kindOf(v)))
	}
	out := make(map[string]any, len(m))
	for _, k := range sortedKeys(m) {
		val := m[k]
		at := path + "/" + escapePointer(k)
		if why, bad := unportable[k]; bad {
			return nil, p.refuse(at, fmt.Sprintf("%s is JSON Schema 2020-12's, and %s", k, why))
		}
		var err error
		switch {
		case k == "$ref":
			s, isString := val.(string)
			if !isString {
				return nil, p.refuse(at, "$ref is not a string")
			}
			val, err = p.ref(s, at)
		case slices.Contains(schemaMaps, k):
			obj, isObj := val.(map[string]any)
			if !isObj {
				return nil, p.refuse(at, k+" is not an object")
			}
			placed := make(map[string]any, len(obj))
			for _, name := range sortedKeys(obj) {
				if placed[name], err = p.schema(obj[name], at+"/"+escapePointer(name)); err != nil {
					return nil, err
				}
			}
			val = placed
		case slices.Contains(schemaOne, k):
			val, err = p.schema(val, at)
		case slices.Contains(schemaList, k):
			list, isList := val.([]any)
			if !isList {
				return nil, p.refuse(at, k+" is not an array")
			}
			placed := make([]any, len(list))
			for i, s := range list {
				if placed[i], err = p.schema(s, fmt.Sprintf("%s/%d", at, i)); err != nil {
					return nil, err
				}
			}
			val = placed
		default:
			// A value, not a schema (enum, const, default, examples,
			// an annotation): AsyncAPI's tools resolve every member
			// "$ref" that holds a string, wherever it is.
			err = p.noRefs(val, at)
		}
		if err != nil {
			return nil, err
		}
		out[k] = val
	}
	// An empty enum allows nothing in 2020-12; draft-07 (and so AsyncAPI)
	// refuses the empty list: not {} says the same.
	if enum, ok := out["enum"].([]any); ok && len(enum) == 0 {
		delete(out, "enum")
		all, _ := out["allOf"].([]any)
		out["allOf"] = append(slices.Clip(all), map[string]any{"not": map[string]any{}})
	}
	// draft-07 ignores every keyword beside a $ref, where 2020-12 applies
	// them all: allOf with the $ref says what the contract says.
	if ref, ok := out["$ref"]; ok && len(out) > 1 {
		delete(out, "$ref")
		all, _ := out["allOf"].([]any)
		out["allOf"] = append(slices.Clip(all), map[string]any{"$ref": ref})
	}
	return out, nil
}

// ref points a $ref of the contract into the document. Only a reference
// within the contract can be: NewSet refused any other that it could not
// resolve, and one it could (to another contract added before) would need
// that contract's place.
func (p placer) ref(s, at string) (string, error) {
	if p.rootID != "" {
		if rest, ok := strings.CutPrefix(s, strings.TrimSuffix(p.rootID, "#")); ok && (rest == "" || rest[0] == '#') {
			s = "#" + strings.TrimPrefix(rest, "#")
		}
	}
	frag, ok := strings.CutPrefix(s, "#")
	if !ok {
		return "", p.refuse(at, fmt.Sprintf("$ref %q refers outside the contract; a contract in an AsyncAPI document must refer only within itself (#/...)", s))
	}
	if frag != "" && !strings.HasPrefix(frag, "/") {
		return "", p.refuse(at, fmt.Sprintf("$ref %q names an anchor, which draft-07 does not have", s))
	}
	return p.base + frag, nil
}

// noRefs refuses a value holding a member "$ref" with a string: AsyncAPI
// parsers would take it for a reference and fail, or replace it.
func (p placer) noRefs(v any, path string) error {
	switch v := v.(type) {
	case map[string]any:
		for _, k := range sortedKeys(v) {
			at := path + "/" + escapePointer(k)
			if _, isString := v[k].(string); k == "$ref" && isString {
				return p.refuse(at, `a value holds a member "$ref", which AsyncAPI's parsers resolve as a reference wherever it is`)
			}
			if err := p.noRefs(v[k], at); err != nil {
				return err
			}
		}
	case []any:
		for i, e := range v {
			if err := p.noRefs(e, fmt.Sprintf("%s/%d", path, i)); err != nil {
				return err
			}
		}
	}
	return nil
}

func kindOf(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case []any:
		return "an array"
	}
	return fmt.Sprintf("%T", v)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// escapePointer escapes a member name for a JSON pointer (RFC 6901).
func escapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}
