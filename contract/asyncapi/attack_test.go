package asyncapi_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/warrenmq/warren/contract"
	"github.com/warrenmq/warren/contract/asyncapi"
)

// What the generator was attacked with from outside, each a clear error
// or a document that says what the contracts say.

// awkwardSet has event types holding what JSON pointers escape (/ cannot
// name a contract file; ~ can), what ends a URI's document part (#),
// spaces, percent signs and non-ASCII, types that make the same key once
// made safe, and a definition whose name needs pointer escaping.
func awkwardSet(t testing.TB) *contract.Set {
	t.Helper()
	obj := json.RawMessage(`{"type":"object"}`)
	var cs []contract.Contract
	for _, typ := range []string{"odd~type", "odd#type", "odd type", "odd_type", "odd%2Ftype", "ödd.ünïcode", "odd.v1"} {
		cs = append(cs, contract.Contract{Type: typ, Version: "1.0", Schema: obj})
	}
	cs = append(cs,
		// odd.v1@1.0 and odd@1.v1.0 read the same: odd.v1.v1.0.
		contract.Contract{Type: "odd", Version: "1.v1.0", Schema: obj},
		contract.Contract{Type: "odd.defs", Version: "1.0", Schema: json.RawMessage(`{
			"type": "object",
			"properties": {"x": {"$ref": "#/$defs/a~1b~0c%20d"}},
			"$defs": {"a/b~c d": {"type": "string"}}
		}`)},
	)
	set, err := contract.NewSet(cs...)
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// Awkward names become keys AsyncAPI takes, unique, the names kept as
// they are where they are data (a message's name, a queue's address),
// and every reference resolves, escaped definitions' included.
func TestAwkwardNames(t *testing.T) {
	t.Parallel()
	doc := awkwardDocument(t)
	if err := validate(t, doc); err != nil {
		t.Fatalf("not valid AsyncAPI 3.0.0: %v\n%s", err, doc)
	}
	var d map[string]any
	if err := json.Unmarshal(doc, &d); err != nil {
		t.Fatal(err)
	}
	msgs := at(t, d, "components", "messages").(map[string]any)
	if len(msgs) != 9 {
		t.Fatalf("%d messages for 9 contracts: %v", len(msgs), keys(msgs))
	}
	names := map[string]bool{}
	for id, m := range msgs {
		names[m.(map[string]any)["name"].(string)] = true
		if strings.ContainsAny(id, "~#/% ") {
			t.Errorf("message key %q", id)
		}
	}
	for _, typ := range []string{"odd~type", "odd#type", "odd type", "odd_type", "ödd.ünïcode", "odd.v1", "odd"} {
		if !names[typ] {
			t.Errorf("no message is named %q: %v", typ, names)
		}
	}
	// An unchanged name keeps its readable key; the two that read the
	// same both get a hash.
	if _, ok := msgs["odd_type.v1.0"]; !ok {
		t.Errorf("odd_type keeps no readable key: %v", keys(msgs))
	}
	if _, ok := msgs["odd.v1.v1.0"]; ok {
		t.Errorf("two contracts that read the same share a key: %v", keys(msgs))
	}
	for _, q := range []string{"a/b~c", "a_b_c", "q#1 ü"} {
		found := false
		for _, ch := range at(t, d, "channels").(map[string]any) {
			found = found || ch.(map[string]any)["address"] == q
		}
		if !found {
			t.Errorf("no channel has the address %q", q)
		}
	}
	var placed map[string]any
	for id, s := range at(t, d, "components", "schemas").(map[string]any) {
		if strings.HasPrefix(id, "odd.defs") {
			placed = s.(map[string]any)
		}
	}
	r := at(t, placed, "properties", "x", "$ref").(string)
	if got := pointer(t, d, strings.ReplaceAll(r, "%20", " ")); got == nil {
		t.Errorf("the escaped definition's $ref %s resolves to nothing", r)
	}
}

func keys(m map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// A contract that AsyncAPI's Schema Object would read otherwise is
// refused, naming the contract, the place and why; never written.
func TestUnportableContractsAreRefused(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, schema, path, why string
	}{
		{"prefixItems", `{"type":"array","prefixItems":[{"type":"string"}]}`, "/prefixItems", "draft-07 ignores it"},
		{"unevaluatedProperties", `{"type":"object","properties":{"a":{"unevaluatedProperties":false}}}`, "/properties/a/unevaluatedProperties", "draft-07 ignores it"},
		{"dependentRequired", `{"type":"object","dependentRequired":{"a":["b"]}}`, "/dependentRequired", "dependencies"},
		{"a nested $id", `{"type":"object","properties":{"a":{"$id":"https://example.invalid/a","type":"string"}}}`, "/properties/a/$id", "another base"},
		{"an anchor", `{"type":"object","properties":{"a":{"$anchor":"here"}}}`, "/properties/a/$anchor", "anchors"},
		{"a $ref to another document", `{"type":"object","properties":{"a":{"$ref":"https://contracts.warren.invalid/base/1.0.json"}}}`, "/properties/a/$ref", "refers outside the contract"},
		{"a $ref in a value", `{"type":"object","enum":[{"$ref":"#/nowhere"}]}`, "/enum/0/$ref", `member "$ref"`},
		{"a $ref in an unknown keyword", `{"type":"object","x-meta":{"see":{"$ref":"#/x"}}}`, "/x-meta/see/$ref", `member "$ref"`},
		{"a member schema", `{"type":"object","schema":{"type":"string"}}`, "/schema", "Multi Format Schema Object"},
		{"a string for properties", `{"type":"object","properties":"a"}`, "/properties", "not an object"},
		{"dependencies", `{"type":"object","dependencies":{"a":["b"]}}`, "/dependencies", "where draft-07 applies it"},
		{"a discriminator", `{"type":"object","properties":{"a":{"discriminator":"kind"}}}`, "/properties/a/discriminator", "tells subtypes apart"},
		{"externalDocs", `{"type":"object","externalDocs":{"url":"https://example.invalid"}}`, "/externalDocs", "documentation"},
	} {
		base := contract.Contract{Type: "base", Version: "1.0", Schema: json.RawMessage(`{"type":"object"}`)}
		bad := contract.Contract{Type: "bad.type", Version: "1.0", Schema: json.RawMessage(c.schema)}
		set, err := contract.NewSet(base, bad)
		if err != nil {
			// Refused already when the set is made: as good.
			continue
		}
		doc, err := asyncapi.Document(set, asyncapi.Stream{})
		var ue *asyncapi.UnportableError
		if !errors.As(err, &ue) {
			t.Errorf("%s: got %v and\n%s\nwant an UnportableError", c.name, err, doc)
			continue
		}
		if ue.Contract != "bad.type@1.0" || ue.Path != c.path || !strings.Contains(err.Error(), c.why) {
			t.Errorf("%s: %v (path %s), want the contract bad.type@1.0 at %s and %q", c.name, err, ue.Path, c.path, c.why)
		}
	}
}

// A contract's $ref by its own root $id stays within it; a boolean schema
// is a schema.
func TestContractsThatArePortable(t *testing.T) {
	t.Parallel()
	set, err := contract.NewSet(
		contract.Contract{Type: "self", Version: "1.0", Schema: json.RawMessage(`{
			"$id": "https://example.invalid/self.json", "type": "object",
			"properties": {"a": {"$ref": "https://example.invalid/self.json#/$defs/a"}},
			"$defs": {"a": {"type": "string"}}}`)},
		contract.Contract{Type: "anything", Version: "1.0", Schema: json.RawMessage(`true`)},
	)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := asyncapi.Document(set, asyncapi.Stream{})
	if err != nil {
		t.Fatal(err)
	}
	if err := validate(t, doc); err != nil {
		t.Fatalf("not valid AsyncAPI: %v", err)
	}
	if !strings.Contains(string(doc), `"$ref": "#/components/schemas/self.v1.0/$defs/a"`) || strings.Contains(string(doc), "example.invalid") {
		t.Errorf("the $ref by the root's $id was not placed:\n%s", doc)
	}
}

// Consumers and queues given twice, names RabbitMQ would not take, and an
// exchange type AsyncAPI cannot name are errors that say so.
func TestBadStreams(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("q", 256)
	for _, c := range []struct {
		name string
		s    asyncapi.Stream
		want string
	}{
		{"a consumer twice", asyncapi.Stream{Consumers: []asyncapi.Consumer{{Name: "a"}, {Name: "a"}}}, `the consumer "a" is given twice`},
		{"a queue in two consumers", asyncapi.Stream{Consumers: []asyncapi.Consumer{{Name: "a"}, {Name: "b", Queues: []asyncapi.Queue{{Name: "a"}}}}}, `the queue "a" is given for both "a" and "b"`},
		{"a queue twice in one consumer", asyncapi.Stream{Consumers: []asyncapi.Consumer{{Name: "a", Queues: []asyncapi.Queue{{Name: "q"}, {Name: "q"}}}}}, `the queue "q" is given for both "a" and "a"`},
		{"an empty consumer", asyncapi.Stream{Consumers: []asyncapi.Consumer{{Name: ""}}}, "the consumer name is empty"},
		{"a long queue", asyncapi.Stream{Consumers: []asyncapi.Consumer{{Name: "a", Queues: []asyncapi.Queue{{Name: long}}}}}, "256 bytes"},
		{"not UTF-8", asyncapi.Stream{Exchange: "x\xff"}, "not UTF-8"},
		{"a consistent-hash exchange", asyncapi.Stream{ExchangeType: "x-consistent-hash"}, "want one of fanout, topic, direct, headers"},
	} {
		_, err := asyncapi.Document(testSet(t), c.s)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}

// A deeply nested contract is placed without a crash. (Compiling it in
// NewSet costs far more than placing it: 5.6s at 1,000 levels, where
// Document takes 0.24s.)
func TestDeepContract(t *testing.T) {
	t.Parallel()
	const depth = 300
	schema := strings.Repeat(`{"type":"object","properties":{"a":`, depth) + `{"type":"string"}` + strings.Repeat("}}", depth)
	set, err := contract.NewSet(contract.Contract{Type: "deep", Version: "1.0", Schema: json.RawMessage(schema)})
	if err != nil {
		t.Skipf("the set refuses it: %v", err)
	}
	doc, err := asyncapi.Document(set, asyncapi.Stream{})
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(doc), `"a": {`); n != depth {
		t.Fatalf("%d levels placed of %d", n, depth)
	}
}

// Every key of channels, operations, messages and schemas matches the
// pattern AsyncAPI gives them, which its JSON Schema does not enforce.
func TestKeysAreAsyncAPIs(t *testing.T) {
	t.Parallel()
	keyPattern := regexp.MustCompile(`^[A-Za-z0-9._-]+$`)
	for _, doc := range [][]byte{awkwardDocument(t)} {
		var d map[string]any
		if err := json.Unmarshal(doc, &d); err != nil {
			t.Fatal(err)
		}
		for _, path := range [][]string{{"channels"}, {"operations"}, {"components", "messages"}, {"components", "schemas"}} {
			for k := range at(t, d, path...).(map[string]any) {
				if !keyPattern.MatchString(k) {
					t.Errorf("%s: key %q", strings.Join(path, "."), k)
				}
			}
		}
	}
}

// An empty enum, which 2020-12 takes (nothing is valid) and draft-07 does
// not, is written as what it means.
func TestEmptyEnum(t *testing.T) {
	t.Parallel()
	set, err := contract.NewSet(contract.Contract{Type: "never", Version: "1.0", Schema: json.RawMessage(`{"type":"object","properties":{"a":{"enum":[]}}}`)})
	if err != nil {
		t.Fatal(err)
	}
	doc, err := asyncapi.Document(set, asyncapi.Stream{})
	if err != nil {
		t.Fatal(err)
	}
	if err := validate(t, doc); err != nil {
		t.Fatalf("not valid AsyncAPI: %v", err)
	}
	var d map[string]any
	if err := json.Unmarshal(doc, &d); err != nil {
		t.Fatal(err)
	}
	a := at(t, d, "components", "schemas", "never.v1.0", "properties", "a").(map[string]any)
	if all, _ := a["allOf"].([]any); a["enum"] != nil || len(all) != 1 || fmt.Sprint(all[0]) != "map[not:map[]]" {
		t.Errorf("the empty enum is not written as not {}: %v", a)
	}
}
