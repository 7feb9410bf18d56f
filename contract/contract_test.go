package contract_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/contract"
	"github.com/warrenmq/warren/dlq"
)

// workItem is a handler's view of a work item's data.
type workItem struct {
	ID       string   `json:"id"`
	Name     string   `json:"name"`
	Priority string   `json:"priority" jsonschema:"enum=urgent,enum=high,enum=medium,enum=low,enum=none"`
	Labels   []string `json:"label_ids,omitempty"`
	Estimate *int     `json:"estimate_point,omitempty"`
	State    *struct {
		Name  string `json:"name"`
		Order int    `json:"order"`
	} `json:"state,omitempty"`
}

func newSet(t *testing.T, cs ...contract.Contract) *contract.Set {
	t.Helper()
	s, err := contract.NewSet(cs...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func ev(eventType, version, data string) warren.Event {
	return warren.Event{ID: "e1", Type: eventType, Version: version, Payload: warren.Payload{Data: json.RawMessage(data)}}
}

// A contract derived from a Go type passes the data that type reads,
// members it does not know included, and names the contract, the field
// and what is wrong for data it cannot read.
func TestCheckNamesTheContractAndTheField(t *testing.T) {
	s := newSet(t, contract.MustOf[workItem]("workitem.updated", "1.0"))
	for _, ok := range []string{
		`{"id":"1","name":"Fix it","priority":"high"}`,
		`{"id":"1","name":"Fix it","priority":"none","label_ids":["a"],"estimate_point":3,"state":{"name":"Done","order":2},"added":"later"}`,
	} {
		if err := s.Check(ev("workitem.updated", "1.0", ok)); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	for data, want := range map[string]struct{ path, reason string }{
		`{"id":"1","priority":"high"}`:                                                {"payload.data.name", "missing, and required"},
		`{"id":"1","name":7,"priority":"high"}`:                                       {"payload.data.name", "got number, want string"},
		`{"id":"1","name":"x","priority":"soon"}`:                                     {"payload.data.priority", `not one of the values the contract allows, ["urgent","high","medium","low","none"]`},
		`{"id":"1","name":"x","priority":"low","label_ids":["a",3]}`:                  {"payload.data.label_ids.1", "got number, want string"},
		`{"id":"1","name":"x","priority":"low","state":{"name":"D","order":"first"}}`: {"payload.data.state.order", "got string, want integer"},
		`["not","an","object"]`:                                                       {"payload.data", "got array, want object"},
		`null`:                                                                        {"payload.data", "got null, want object"},
		``:                                                                            {"payload.data", "got null, want object"},
	} {
		err := s.Check(ev("workitem.updated", "1.0", data))
		var v *contract.Violation
		if !errors.As(err, &v) {
			t.Errorf("%s: %v, want a Violation", data, err)
			continue
		}
		if v.Contract != "workitem.updated@1.0" || v.Path != want.path || !strings.Contains(v.Reason, want.reason) {
			t.Errorf("%s: %+v, want path %s and a reason with %q", data, v, want.path, want.reason)
		}
		if !errors.Is(err, warren.ErrInvalidEvent) {
			t.Errorf("%s: a violation does not match warren.ErrInvalidEvent", data)
		}
		if err.Error() != "contract workitem.updated@1.0: "+want.path+": "+v.Reason {
			t.Errorf("error text %q", err)
		}
	}
}

// An event whose type or version has no contract is refused by Check and
// let through by CheckKnown.
func TestEventsWithoutAContract(t *testing.T) {
	s := newSet(t, contract.MustOf[workItem]("workitem.updated", "1.0"))
	for _, e := range []warren.Event{ev("workitem.created", "1.0", `{}`), ev("workitem.updated", "2.0", `{}`), ev("workitem.updated", "", `{}`)} {
		if err := s.Check(e); !errors.Is(err, contract.ErrNoContract) {
			t.Errorf("%s@%s: Check %v, want ErrNoContract", e.Type, e.Version, err)
		}
		if err := s.CheckKnown(e); err != nil {
			t.Errorf("%s@%s: CheckKnown %v", e.Type, e.Version, err)
		}
	}
	if err := s.CheckKnown(ev("workitem.updated", "1.0", `{}`)); err == nil {
		t.Error("CheckKnown passed data that breaks a known contract")
	}
}

// Contracts written to a directory load back as the same contracts, one
// file per type and version, and check alike.
func TestWriteDirAndLoadDir(t *testing.T) {
	dir := t.TempDir()
	s := newSet(t, contract.MustOf[workItem]("workitem.updated", "1.0"), contract.MustOf[workItem]("workitem.updated", "1.1"),
		contract.MustOf[map[string]any]("workitem.deleted", "1.0"))
	if err := s.WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"workitem.updated/1.0.json", "workitem.updated/1.1.json", "workitem.deleted/1.0.json"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), contract.Draft2020) {
			t.Errorf("%s does not declare draft 2020-12:\n%s", f, b)
		}
	}
	loaded, err := contract.LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(loaded.Contracts()), 3; got != want {
		t.Fatalf("%d contracts loaded, want %d", got, want)
	}
	if err := loaded.Check(ev("workitem.updated", "1.1", `{"id":"1","name":7,"priority":"low"}`)); err == nil || !strings.Contains(err.Error(), "payload.data.name") {
		t.Errorf("loaded contract: %v", err)
	}
	// What is not a contract is skipped; a .json file outside the layout
	// is an error.
	os.WriteFile(filepath.Join(dir, "README.md"), []byte("# contracts"), 0o644)
	os.WriteFile(filepath.Join(dir, ".gitkeep"), nil, 0o644)
	os.WriteFile(filepath.Join(dir, "workitem.updated", "notes.txt"), nil, 0o644)
	if again, err := contract.LoadDir(dir); err != nil || len(again.Contracts()) != 3 {
		t.Fatalf("with a README, a .gitkeep and notes: %v", err)
	}
	os.WriteFile(filepath.Join(dir, "stray.json"), []byte("{}"), 0o644)
	if _, err := contract.LoadDir(dir); err == nil || !strings.Contains(err.Error(), "DIR/TYPE/VERSION.json") {
		t.Errorf("a file outside the layout: %v", err)
	}
}

// What cannot be a contract is refused when the set is made, not when an
// event meets it; nothing is fetched from the network.
func TestNewSetRefuses(t *testing.T) {
	good := contract.MustOf[workItem]("t", "1")
	for name, c := range map[string][]contract.Contract{
		"twice":         {good, good},
		"not JSON":      {{Type: "t", Version: "1", Schema: []byte(`{`)}},
		"not a schema":  {{Type: "t", Version: "1", Schema: []byte(`{"type": 5}`)}},
		"a remote $ref": {{Type: "t", Version: "1", Schema: []byte(`{"$ref": "https://example.com/s.json"}`)}},
		"a slash":       {{Type: "a/b", Version: "1", Schema: []byte(`{}`)}},
		"an @":          {{Type: "t", Version: "1@2", Schema: []byte(`{}`)}},
		"no version":    {{Type: "t", Version: "", Schema: []byte(`{}`)}},
		"a parent (..)": {{Type: "..", Version: "1", Schema: []byte(`{}`)}},
		"spaces (type)": {{Type: " t", Version: "1", Schema: []byte(`{}`)}},
	} {
		if _, err := contract.NewSet(c...); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := contract.Of[[]string]("t", "1"); err == nil {
		t.Error("Of accepted a type that is not an object")
	}
}

// The middleware hands valid events on and dead-letters the others as
// undecodable without calling the handler.
func TestMiddleware(t *testing.T) {
	s := newSet(t, contract.MustOf[workItem]("workitem.updated", "1.0"))
	called := 0
	h := contract.Middleware(s.Check)(warren.HandlerFunc(func(_ context.Context, _ *warren.Message) error {
		called++
		return nil
	}))
	if err := h.Handle(context.Background(), &warren.Message{Event: ev("workitem.updated", "1.0", `{"id":"1","name":"x","priority":"low"}`)}); err != nil || called != 1 {
		t.Fatalf("valid event: %v, handler called %d times", err, called)
	}
	err := h.Handle(context.Background(), &warren.Message{Event: ev("workitem.updated", "1.0", `{"id":"1","name":"x","priority":1}`)})
	if !errors.Is(err, warren.ErrUndecodable) || !strings.Contains(err.Error(), "payload.data.priority") || called != 1 {
		t.Errorf("invalid event: %v, handler called %d times", err, called)
	}
}

// Dead letters that broke a contract group by the contract and the field,
// whatever the values were (dlq.Signature, which warren dlq stats and the
// console group by).
func TestViolationsGroupByContractAndField(t *testing.T) {
	s := newSet(t, contract.MustOf[workItem]("workitem.updated", "1.0"), contract.MustOf[workItem]("workitem.created", "1.0"))
	signature := func(typ, data string) string {
		t.Helper()
		err := s.Check(ev(typ, "1.0", data))
		if err == nil {
			t.Fatalf("%s passed", data)
		}
		return dlq.Signature(dlq.ClassUndecodable, warren.Undecodable(err).Error())
	}
	name1 := signature("workitem.updated", `{"id":"1","name":7,"priority":"low"}`)
	name2 := signature("workitem.updated", `{"id":"2","name":false,"priority":"high","label_ids":["x"]}`)
	label3 := signature("workitem.updated", `{"id":"1","name":"x","priority":"low","label_ids":["a","b","c",3]}`)
	label1 := signature("workitem.updated", `{"id":"1","name":"x","priority":"low","label_ids":[5]}`)
	priority := signature("workitem.updated", `{"id":"1","name":"x","priority":"soon"}`)
	otherType := signature("workitem.created", `{"id":"1","name":7,"priority":"low"}`)
	if name1 != name2 || label1 != label3 {
		t.Errorf("one field, several values: %q / %q and %q / %q; want one group each", name1, name2, label1, label3)
	}
	if name1 == priority || name1 == otherType || name1 == label1 {
		t.Errorf("different fields or contracts share a group: %q, %q, %q, %q", name1, priority, otherType, label1)
	}
	for _, want := range []string{"workitem.updated@", "payload.data.name"} {
		if !strings.Contains(name1, want) {
			t.Errorf("signature %q does not name %q", name1, want)
		}
	}
}

// A type that contains itself has a finite contract, checked at every
// depth, and compared without going round for ever.
func TestRecursiveTypes(t *testing.T) {
	type node struct {
		Name     string  `json:"name"`
		Children []*node `json:"children,omitempty"`
	}
	type node2 struct {
		Name     string   `json:"name"`
		Children []*node2 `json:"children,omitempty"`
		Order    int      `json:"order"`
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := contract.Of[node]("tree.updated", "1")
		if err != nil {
			t.Error(err)
			return
		}
		s := newSet(t, c)
		deep := `{"name":"a","children":[{"name":"b","children":[{"name":7}]}]}`
		if err := s.Check(ev("tree.updated", "1", deep)); err == nil || !strings.Contains(err.Error(), "payload.data.children.0.children.0.name") {
			t.Errorf("a deep violation: %v", err)
		}
		changed := newSet(t, contract.MustOf[node2]("tree.updated", "1"))
		breaks := contract.Compare(s, changed, contract.Backward)
		if len(breaks) == 0 || !strings.Contains(breaks[0].Path, "order") {
			t.Errorf("a required field added to a recursive type: %v", breaks)
		}
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("a recursive type: Of, Check or Compare does not return")
	}
}

// A contract reads as what it checks: the reflector's copy of the root
// type in $defs, which nothing refers to, is left out; a nested type's
// definition stays where a property refers to it.
func TestOfWritesNoUnusedDefinitions(t *testing.T) {
	type flat struct {
		ID string `json:"id"`
	}
	type inner struct {
		N int `json:"n"`
	}
	type outer struct {
		In inner `json:"in"`
	}
	var doc struct {
		Defs map[string]json.RawMessage `json:"$defs"`
	}
	if err := json.Unmarshal(contract.MustOf[flat]("flat", "1").Schema, &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Defs) != 0 {
		t.Errorf("a flat type's contract defines %d types, want none", len(doc.Defs))
	}
	doc.Defs = nil
	if err := json.Unmarshal(contract.MustOf[outer]("outer", "1").Schema, &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Defs) != 1 {
		t.Errorf("a type with one nested type defines %d types, want 1 (the nested one): %v", len(doc.Defs), doc.Defs)
	}
	for name := range doc.Defs {
		if !strings.HasSuffix(name, ".inner") {
			t.Errorf("defines %s, want only the nested inner", name)
		}
	}
}
