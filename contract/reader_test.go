package contract_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/contract"
)

type itemV1 struct {
	Name string `json:"name"`
}

type itemV2 struct {
	Title    string `json:"title"`
	Priority string `json:"priority"`
}

// renameNameToTitle is the upcast from 1.0 to 1.1: name became title.
func renameNameToTitle(data json.RawMessage) (json.RawMessage, error) {
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, err
	}
	m["title"] = m["name"]
	delete(m, "name")
	return json.Marshal(m)
}

// addPriority is the upcast from 1.1 to 2.0: priority became required.
func addPriority(data json.RawMessage) (json.RawMessage, error) {
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, err
	}
	if _, ok := m["priority"]; !ok {
		m["priority"] = "none"
	}
	return json.Marshal(m)
}

// A consumer that reads 2.0 gets 1.0 and 1.1 events upcast along the
// chain, each step checked against its contract, with the message's body
// left as it arrived; a version it does not read, or data that breaks a
// contract on the way, never reaches the handler.
func TestReaderUpcastsOlderVersions(t *testing.T) {
	s := newSet(t,
		contract.MustOf[itemV1]("item.updated", "1.0"),
		contract.MustOf[itemV2]("item.updated", "2.0"),
	)
	read, err := s.Reader(contract.Reads{Type: "item.updated", Version: "2.0", Upcasts: []contract.Upcast{
		{From: "1.0", To: "1.1", Func: renameNameToTitle},
		{From: "1.1", To: "2.0", Func: addPriority},
	}})
	if err != nil {
		t.Fatal(err)
	}
	var got []warren.Event
	h := read(warren.Typed(func(_ context.Context, m *warren.Message, d itemV2) error {
		got = append(got, m.Event)
		if d.Title == "" || d.Priority == "" {
			t.Errorf("handler got %+v", d)
		}
		return nil
	}))
	body := []byte(`{"as":"it arrived"}`)
	for _, e := range []warren.Event{
		ev("item.updated", "1.0", `{"name":"old"}`),
		ev("item.updated", "1.1", `{"title":"middle"}`),
		ev("item.updated", "2.0", `{"title":"new","priority":"high"}`),
	} {
		m := &warren.Message{Event: e, Body: body}
		if err := h.Handle(context.Background(), m); err != nil {
			t.Fatalf("%s: %v", e.Version, err)
		}
		if string(m.Body) != string(body) {
			t.Errorf("%s: the body changed: %s", e.Version, m.Body)
		}
	}
	if len(got) != 3 || got[0].Version != "2.0" || string(got[0].Payload.Data) != `{"priority":"none","title":"old"}` {
		t.Errorf("handled %+v", got)
	}
	for data, want := range map[[2]string]string{
		{"0.9", `{"name":"x"}`}:              "this consumer reads 2.0, 1.0, 1.1",
		{"1.0", `{"name":7}`}:                "contract item.updated@1.0: payload.data.name",
		{"2.0", `{"title":"x"}`}:             "contract item.updated@2.0: payload.data.priority: missing, and required",
		{"1.0", `{"name":"x","priority":3}`}: "contract item.updated@2.0: payload.data.priority",
	} {
		err := h.Handle(context.Background(), &warren.Message{Event: ev("item.updated", data[0], data[1])})
		if !errors.Is(err, warren.ErrUndecodable) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s %s: %v, want undecodable with %q", data[0], data[1], err, want)
		}
	}
	if len(got) != 3 {
		t.Errorf("the handler was called for events that cannot be read: %d calls", len(got))
	}
}

// Declarations that cannot work are refused when the middleware is made.
func TestReaderRefusesBrokenChains(t *testing.T) {
	s := newSet(t)
	up := func(from, to string) contract.Upcast {
		return contract.Upcast{From: from, To: to, Func: func(d json.RawMessage) (json.RawMessage, error) { return d, nil }}
	}
	for name, r := range map[string][]contract.Reads{
		"a circle":        {{Type: "t", Version: "3", Upcasts: []contract.Upcast{up("1", "2"), up("2", "1")}}},
		"stops short":     {{Type: "t", Version: "3", Upcasts: []contract.Upcast{up("1", "2")}}},
		"two from one":    {{Type: "t", Version: "3", Upcasts: []contract.Upcast{up("1", "3"), up("1", "2")}}},
		"from the target": {{Type: "t", Version: "3", Upcasts: []contract.Upcast{up("3", "4")}}},
		"no func":         {{Type: "t", Version: "3", Upcasts: []contract.Upcast{{From: "1", To: "3"}}}},
		"a type twice":    {{Type: "t", Version: "3"}, {Type: "t", Version: "2"}},
		"no version":      {{Type: "t"}},
	} {
		if _, err := s.Reader(r...); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
