package contract

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"

	"github.com/warrenmq/warren"
)

// Set is a compiled set of contracts, at most one per event type and
// version. It is safe for concurrent use.
type Set struct {
	contracts map[string]Contract
	schemas   map[string]*jsonschema.Schema
}

// NewSet compiles cs. A schema that is not valid JSON Schema, that refers
// to another document ($ref beyond itself: nothing is fetched), or a type
// and version given twice, is an error.
func NewSet(cs ...Contract) (*Set, error) {
	s := &Set{contracts: map[string]Contract{}, schemas: map[string]*jsonschema.Schema{}}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	// format is an assertion, as contract.Of's users write it
	// (format=email): a value the format refuses breaks the contract.
	c.AssertFormat()
	c.UseLoader(noFetching{})
	for _, ct := range cs {
		if err := checkName(ct.Type, ct.Version); err != nil {
			return nil, err
		}
		k := ct.Key()
		if _, dup := s.contracts[k]; dup {
			return nil, fmt.Errorf("contract %s: given twice", k)
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(ct.Schema))
		if err != nil {
			return nil, fmt.Errorf("contract %s: the schema is not JSON: %w", k, err)
		}
		if m, ok := doc.(map[string]any); ok && m["$schema"] != nil && strings.TrimSuffix(fmt.Sprint(m["$schema"]), "#") != Draft2020 {
			return nil, fmt.Errorf("contract %s: $schema is %v; contracts are JSON Schema draft 2020-12 (%s), which Compare understands", k, m["$schema"], Draft2020)
		}
		loc := schemaURL(ct)
		if err := c.AddResource(loc, doc); err != nil {
			return nil, fmt.Errorf("contract %s: %w", k, err)
		}
		sch, err := c.Compile(loc)
		if err != nil {
			return nil, fmt.Errorf("contract %s: %w", k, err)
		}
		s.contracts[k], s.schemas[k] = ct, sch
	}
	return s, nil
}

// schemaURL names a contract's schema for the compiler: a URL under a
// reserved domain (RFC 2606), never fetched.
func schemaURL(c Contract) string {
	return "https://contracts.warren.invalid/" + url.PathEscape(c.Type) + "/" + url.PathEscape(c.Version) + ".json"
}

// noFetching refuses every document the compiler asks for: a contract
// stands alone, and checking one must not reach the network.
type noFetching struct{}

func (noFetching) Load(u string) (any, error) {
	return nil, fmt.Errorf("a contract refers to %s: contracts must stand alone ($ref within the schema only)", u)
}

// Contracts returns the set's contracts, by type then version.
func (s *Set) Contracts() []Contract {
	out := make([]Contract, 0, len(s.contracts))
	for _, c := range s.contracts {
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b Contract) int {
		return cmp.Or(strings.Compare(a.Type, b.Type), strings.Compare(a.Version, b.Version))
	})
	return out
}

// Has reports whether the set has a contract for eventType at version.
func (s *Set) Has(eventType, version string) bool {
	_, ok := s.schemas[key(eventType, version)]
	return ok
}

// Violation is an event that breaks its contract.
type Violation struct {
	// Contract is the contract broken: "workitem.updated@1.0".
	Contract string
	// Path is where in the event: "payload.data.state.name" (array
	// elements by index: "payload.data.labels.2").
	Path string
	// Reason says what is wrong there: "got number, want string".
	Reason string
}

func (v *Violation) Error() string {
	return fmt.Sprintf("contract %s: %s: %s", v.Contract, v.Path, v.Reason)
}

// FailedField returns the contract and the field (warren.FieldFailure),
// which a dead letter's headers carry.
func (v *Violation) FailedField() (contract, path string) { return v.Contract, v.Path }

// Is makes a Violation match warren.ErrInvalidEvent: an event that breaks
// its contract is not one its consumers can handle.
func (v *Violation) Is(target error) bool { return target == warren.ErrInvalidEvent }

// Check checks ev's payload data against the contract of its type and
// version. It returns nil, a *Violation (the first failure, at the
// deepest place the schema names), or, for a type and version the set has
// no contract for, an error matching [ErrNoContract].
func (s *Set) Check(ev warren.Event) error {
	k := key(ev.Type, ev.Version)
	sch, ok := s.schemas[k]
	if !ok {
		return fmt.Errorf("contract: event %.80q is %.120s: %w", ev.ID, k, ErrNoContract)
	}
	data := []byte(ev.Payload.Data)
	if len(bytes.TrimSpace(data)) == 0 {
		data = []byte("null")
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return &Violation{Contract: k, Path: "payload.data", Reason: "not JSON"}
	}
	// Plane's triggers write some data as a JSON string holding the
	// object ("{}" on every soft delete), which warren.Typed and
	// DecodeData read as that object: the contract is checked on what
	// they read.
	if text, ok := v.(string); ok {
		if inner, err := jsonschema.UnmarshalJSON(strings.NewReader(text)); err == nil {
			switch inner.(type) {
			case map[string]any, []any:
				v = inner
			}
		}
	}
	err = sch.Validate(v)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return &Violation{Contract: k, Path: "payload.data", Reason: err.Error()}
	}
	leaf := deepest(ve)
	path := "payload.data"
	for _, p := range leaf.InstanceLocation {
		path += "." + clip(p)
	}
	field, reason := explain(leaf.ErrorKind)
	if field != "" {
		path += "." + clip(field)
	}
	return &Violation{Contract: k, Path: path, Reason: reason}
}

// explain says what is wrong without quoting the event's values: a
// violation's text goes into logs, dead-letter headers and the DLQ's
// signatures, where a value could be large, secret, or split one failure
// into as many groups as there are values. It names a member the failure
// is about (a missing or unexpected one) apart, for the path.
func explain(k jsonschema.ErrorKind) (field, reason string) {
	switch k := k.(type) {
	case *kind.Type:
		return "", fmt.Sprintf("got %s, want %s", k.Got, strings.Join(k.Want, " or "))
	case *kind.Required:
		return k.Missing[0], "missing, and required"
	case *kind.AdditionalProperties:
		return k.Properties[0], "a member the contract does not allow"
	case *kind.Enum:
		want, _ := json.Marshal(k.Want)
		return "", "not one of the values the contract allows, " + clip(string(want))
	case *kind.Const:
		return "", "not the value the contract requires"
	case *kind.Pattern:
		return "", fmt.Sprintf("does not match the pattern %s", clip(k.Want))
	case *kind.Format:
		return "", "not a valid " + clip(k.Want)
	}
	return "", "breaks the contract's " + strings.Join(k.KeywordPath(), "/")
}

// clip shortens what a violation quotes from a schema or an event's keys.
func clip(s string) string {
	const most = 64
	if len(s) <= most {
		return s
	}
	return strings.ToValidUTF8(s[:most], "") + "…"
}

// CheckKnown is Check for a stream where not every event type has a
// contract yet: an event without one passes.
func (s *Set) CheckKnown(ev warren.Event) error {
	if err := s.Check(ev); err != nil && !errors.Is(err, ErrNoContract) {
		return err
	}
	return nil
}

// deepest returns the first failure at the deepest instance location: the
// most specific thing a reader can fix.
func deepest(e *jsonschema.ValidationError) *jsonschema.ValidationError {
	best := e
	var walk func(*jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			if len(e.InstanceLocation) > len(best.InstanceLocation) || len(best.Causes) > 0 {
				best = e
			}
			return
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(e)
	return best
}

// Middleware checks every event with check (a Set's Check, or CheckKnown
// where not every event type has a contract yet) before next sees it. An
// event that fails is dead-lettered at once as undecodable
// (warren.Undecodable), its error the *Violation naming the contract and
// the field: no retry can make it valid.
func Middleware(check func(warren.Event) error) warren.Middleware {
	return func(next warren.Handler) warren.Handler {
		return warren.HandlerFunc(func(ctx context.Context, m *warren.Message) error {
			if err := check(m.Event); err != nil {
				return warren.Undecodable(err)
			}
			return next.Handle(ctx, m)
		})
	}
}

// fileExt is a contract file's extension: DIR/TYPE/VERSION.json.
const fileExt = ".json"

// LoadDir reads the contracts WriteDir wrote: dir/TYPE/VERSION.json, one
// JSON Schema each. Files not ending in .json, and names starting with a
// dot, are not contracts and are skipped.
func LoadDir(dir string) (*Set, error) {
	var cs []Contract
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		// A README, a .gitkeep, an editor's backup: not contracts.
		if rel != "." && (strings.HasPrefix(d.Name(), ".") || !d.IsDir() && filepath.Ext(d.Name()) != fileExt) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			if strings.Count(rel, string(filepath.Separator)) > 0 {
				return fmt.Errorf("contract: %s: contracts are DIR/TYPE/VERSION.json, not deeper", path)
			}
			return nil
		}
		eventType, file, ok := strings.Cut(filepath.ToSlash(rel), "/")
		if !ok || !strings.HasSuffix(file, fileExt) {
			return fmt.Errorf("contract: %s: contracts are DIR/TYPE/VERSION.json", path)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		cs = append(cs, Contract{Type: eventType, Version: strings.TrimSuffix(file, fileExt), Schema: b})
		return nil
	})
	if err != nil {
		return nil, err
	}
	return NewSet(cs...)
}

// WriteDir writes each contract of the set to dir/TYPE/VERSION.json, the
// layout LoadDir and `warren contracts check` read. Files of contracts
// the set does not have are left alone.
func (s *Set) WriteDir(dir string) error {
	for _, c := range s.Contracts() {
		d := filepath.Join(dir, c.Type)
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
		b := bytes.TrimSpace(c.Schema)
		if err := os.WriteFile(filepath.Join(d, c.Version+fileExt), append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	return nil
}
