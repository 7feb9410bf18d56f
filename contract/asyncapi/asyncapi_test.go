package asyncapi_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/warrenmq/warren/contract"
	"github.com/warrenmq/warren/contract/asyncapi"
)

// The types the test's contracts are derived from: a named nested type
// and a recursive one, so the contracts have $defs and $refs to place.
type state struct {
	Name string `json:"name"`
}

type node struct {
	Label    string  `json:"label"`
	Children []*node `json:"children,omitempty"`
}

type workItem struct {
	Name  string `json:"name"`
	State *state `json:"state"`
	Tree  node   `json:"tree"`
}

type workItemV2 struct {
	Title string `json:"title"`
}

type project struct {
	ID string `json:"id"`
}

// handWritten is a contract someone wrote: a $ref with a sibling keyword,
// which 2020-12 applies and draft-07 ignores.
const handWritten = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "properties": {"amount": {"$ref": "#/$defs/money", "maximum": 100}},
  "$defs": {"money": {"type": "number", "minimum": 0}}
}`

func testSet(t testing.TB) *contract.Set {
	t.Helper()
	set, err := contract.NewSet(
		contract.MustOf[workItem]("workitem.updated", "1.0"),
		contract.MustOf[workItemV2]("workitem.updated", "2.0"),
		contract.MustOf[project]("project.created", "1.0"),
		contract.Contract{Type: "invoice.paid", Version: "1.0", Schema: json.RawMessage(handWritten)},
	)
	if err != nil {
		t.Fatal(err)
	}
	return set
}

func testStream() asyncapi.Stream {
	return asyncapi.Stream{Consumers: []asyncapi.Consumer{
		{Name: "webhook", Handles: []string{"workitem."}},
		{Name: "automation"}, // prefixes not given: everything that reaches it
		{Name: "sync", Handles: []string{"project."}, Queues: []asyncapi.Queue{{Name: "sync.p1"}, {Name: "sync.p0"}}},
		{Name: "billing", Queues: []asyncapi.Queue{{Name: "billing", Route: "through billing.router (topic, key invoice.#)", Filtered: true, EventTypes: []string{"invoice.paid"}}}},
	}}
}

// generate builds the document and decodes it for the checks.
func generate(t testing.TB, set *contract.Set, s asyncapi.Stream) ([]byte, map[string]any) {
	t.Helper()
	b, err := asyncapi.Document(set, s)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("the document is not JSON: %v", err)
	}
	return b, doc
}

func at(t testing.TB, v any, path ...string) any {
	t.Helper()
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			t.Fatalf("%s: not an object at %q", strings.Join(path, "/"), p)
		}
		if v, ok = m[p]; !ok {
			t.Fatalf("%s: no %q", strings.Join(path, "/"), p)
		}
	}
	return v
}

func refs(t testing.TB, v any) []string {
	t.Helper()
	var out []string
	for _, r := range v.([]any) {
		out = append(out, r.(map[string]any)["$ref"].(string))
	}
	return out
}

// The same contracts and stream give the same bytes, whatever the order
// the consumers and queues were given in.
func TestDocumentIsDeterministic(t *testing.T) {
	t.Parallel()
	first, _ := generate(t, testSet(t), testStream())
	s := testStream()
	s.Consumers[0], s.Consumers[3] = s.Consumers[3], s.Consumers[0]
	s.Consumers[1].Handles = nil
	for range 5 {
		again, _ := generate(t, testSet(t), s)
		if !bytes.Equal(first, again) {
			t.Fatalf("two documents of one stream differ:\n%s\n---\n%s", first, again)
		}
	}
	if !bytes.HasSuffix(first, []byte("}\n")) || !bytes.Contains(first, []byte("\n  \"channels\"")) {
		t.Fatalf("not indented JSON ending in a newline:\n%.300s", first)
	}
}

// Every contract is a message and a schema, the exchange's channel
// carries all of them and the relay's operation sends them, each queue's
// channel carries what reaches it, and each consumer's operation receives
// what it handles.
func TestDocumentHasEveryContractAndConsumer(t *testing.T) {
	t.Parallel()
	_, doc := generate(t, testSet(t), testStream())
	if doc["asyncapi"] != "3.0.0" {
		t.Fatalf("asyncapi %v", doc["asyncapi"])
	}
	all := []string{"invoice.paid.v1.0", "project.created.v1.0", "workitem.updated.v1.0", "workitem.updated.v2.0"}
	for _, id := range all {
		at(t, doc, "components", "messages", id)
		at(t, doc, "components", "schemas", id)
	}
	if got := at(t, doc, "components", "messages", "workitem.updated.v2.0", "bindings", "amqp", "messageType"); got != "workitem.updated" {
		t.Errorf("messageType %v", got)
	}
	x := at(t, doc, "channels", "exchange.warren.events").(map[string]any)
	if x["address"] != "{eventType}" || len(x["messages"].(map[string]any)) != 4 {
		t.Errorf("the exchange's channel: %v", x)
	}
	if got := at(t, x, "bindings", "amqp", "exchange", "type"); got != "fanout" {
		t.Errorf("exchange type %v", got)
	}
	send := at(t, doc, "operations", "send.warren.events").(map[string]any)
	if send["action"] != "send" || len(refs(t, send["messages"])) != 4 {
		t.Errorf("send: %v", send)
	}

	for _, c := range []struct {
		queue    string
		reaching int
		handled  []string
	}{
		{"webhook", 4, []string{"workitem.updated.v1.0", "workitem.updated.v2.0"}},
		{"automation", 4, all},
		{"sync.p0", 4, []string{"project.created.v1.0"}},
		{"sync.p1", 4, []string{"project.created.v1.0"}},
		{"billing", 1, []string{"invoice.paid.v1.0"}},
	} {
		ch := at(t, doc, "channels", "queue."+c.queue).(map[string]any)
		if ch["address"] != c.queue || len(ch["messages"].(map[string]any)) != c.reaching {
			t.Errorf("queue %s: address %v, %d messages, want %d", c.queue, ch["address"], len(ch["messages"].(map[string]any)), c.reaching)
		}
		if got := at(t, ch, "bindings", "amqp", "queue", "name"); got != c.queue {
			t.Errorf("queue %s: binding names %v", c.queue, got)
		}
		op := at(t, doc, "operations", "receive."+c.queue).(map[string]any)
		var want []string
		for _, id := range c.handled {
			want = append(want, "#/channels/queue."+c.queue+"/messages/"+id)
		}
		if got := refs(t, op["messages"]); strings.Join(got, " ") != strings.Join(want, " ") || op["action"] != "receive" {
			t.Errorf("receive %s: %v, want %v", c.queue, got, want)
		}
	}
	if d := at(t, doc, "operations", "receive.automation", "description").(string); !strings.Contains(d, "prefixes were not given") {
		t.Errorf("a consumer without prefixes is not said to be one: %s", d)
	}
	if d := at(t, doc, "operations", "receive.webhook", "description").(string); !strings.Contains(d, `prefixes "workitem."`) {
		t.Errorf("the webhook's prefixes are not said: %s", d)
	}
	if d := at(t, doc, "channels", "queue.billing", "description").(string); !strings.Contains(d, "billing.router") {
		t.Errorf("the route is not described: %s", d)
	}
}

// Every $ref of the document resolves within it, the contracts' own ones
// included, and points where the contract meant.
func TestDocumentRefsResolve(t *testing.T) {
	t.Parallel()
	b, doc := generate(t, testSet(t), testStream())
	n := 0
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if r, ok := v["$ref"].(string); ok {
				n++
				target := pointer(t, doc, r)
				if target == nil {
					t.Errorf("$ref %s resolves to nothing", r)
				}
			}
			for _, e := range v {
				walk(e)
			}
		case []any:
			for _, e := range v {
				walk(e)
			}
		}
	}
	walk(doc)
	if n < 20 {
		t.Fatalf("only %d $refs; the walk is broken", n)
	}
	// The recursive type refers to its own definition, now in the
	// document.
	if !bytes.Contains(b, []byte(`"$ref": "#/components/schemas/workitem.updated.v1.0/$defs/github.com.warrenmq.warren.contract.asyncapi_test.node"`)) {
		t.Errorf("the contract's $defs reference was not placed:\n%s", b)
	}
	// The hand-written $ref with a sibling is an allOf: draft-07 would
	// ignore maximum beside the $ref.
	amount := at(t, doc, "components", "schemas", "invoice.paid.v1.0", "properties", "amount").(map[string]any)
	if amount["maximum"] == nil || amount["$ref"] != nil || len(amount["allOf"].([]any)) != 1 {
		t.Errorf("a $ref with a sibling: %v", amount)
	}
	if _, ok := at(t, doc, "components", "schemas", "invoice.paid.v1.0").(map[string]any)["$schema"]; ok {
		t.Errorf("$schema kept in a schema whose dialect the document sets")
	}
}

// pointer resolves a "#/..." reference in doc.
func pointer(t testing.TB, doc any, ref string) any {
	t.Helper()
	p, ok := strings.CutPrefix(ref, "#/")
	if !ok {
		t.Fatalf("$ref %q is not within the document", ref)
	}
	v := doc
	for _, tok := range strings.Split(p, "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[tok]
	}
	return v
}

// With no contracts and no consumers there is still a document: the
// exchange and the relay's operation.
func TestDocumentOfNothing(t *testing.T) {
	t.Parallel()
	_, doc := generate(t, nil, asyncapi.Stream{Exchange: "plane.event_stream", Title: "Plane", Version: "2"})
	if at(t, doc, "info", "title") != "Plane" || at(t, doc, "info", "version") != "2" {
		t.Errorf("info: %v", doc["info"])
	}
	at(t, doc, "channels", "exchange.plane.event_stream")
	if got := at(t, doc, "operations", "send.plane.event_stream", "messages").([]any); len(got) != 0 {
		t.Errorf("send with no contracts: %v", got)
	}
}

// A queue or exchange declared otherwise than warren declares them is
// described as it is, in its AMQP binding and in words.
func TestDeclarationsAreDescribed(t *testing.T) {
	t.Parallel()
	_, doc := generate(t, testSet(t), asyncapi.Stream{
		ExchangeDeclaration: asyncapi.Declaration{Transient: true, AutoDelete: true},
		Consumers: []asyncapi.Consumer{{Name: "tool", Queues: []asyncapi.Queue{{Name: "amq.gen-1", Declaration: asyncapi.Declaration{Transient: true, Exclusive: true, AutoDelete: true}}}},
			{Name: "webhook"}},
	})
	x := at(t, doc, "channels", "exchange.warren.events", "bindings", "amqp", "exchange").(map[string]any)
	if x["durable"] != false || x["autoDelete"] != true {
		t.Errorf("exchange: %v", x)
	}
	q := at(t, doc, "channels", "queue.amq.gen-1", "bindings", "amqp", "queue").(map[string]any)
	if q["durable"] != false || q["exclusive"] != true || q["autoDelete"] != true {
		t.Errorf("queue: %v", q)
	}
	if d := at(t, doc, "channels", "queue.amq.gen-1", "description").(string); !strings.Contains(d, "transient") || !strings.Contains(d, "exclusive") {
		t.Errorf("the queue's description: %s", d)
	}
	q = at(t, doc, "channels", "queue.webhook", "bindings", "amqp", "queue").(map[string]any)
	if q["durable"] != true || q["exclusive"] != false || q["autoDelete"] != false {
		t.Errorf("warren's queue: %v", q)
	}
}
