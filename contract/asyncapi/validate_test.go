package asyncapi_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/contract/asyncapi"
	"github.com/warrenmq/warren/contract/plane"
)

// specSchema is the official JSON Schema of AsyncAPI 3.0.0, bundled with
// every definition and binding it refers to (testdata/README.md says
// where it comes from). No Go module serves it, nor an AsyncAPI 3 parser.
var specSchema = sync.OnceValues(func() (*jsonschema.Schema, error) {
	f, err := os.Open("testdata/asyncapi-3.0.0.schema.json")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	doc, err := jsonschema.UnmarshalJSON(f)
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	// Its draft-07 and the definitions it embeds under their $ids are
	// all it needs: nothing is fetched.
	c.UseLoader(refuseLoads{})
	const loc = "http://asyncapi.com/definitions/3.0.0/asyncapi.json"
	if err := c.AddResource(loc, doc); err != nil {
		return nil, err
	}
	return c.Compile(loc)
})

type refuseLoads struct{}

func (refuseLoads) Load(u string) (any, error) {
	return nil, errors.New("the AsyncAPI schema refers to " + u + ", which the test does not fetch")
}

// validate checks doc against the official AsyncAPI 3.0.0 JSON Schema.
func validate(t testing.TB, doc []byte) error {
	t.Helper()
	sch, err := specSchema()
	if err != nil {
		t.Fatalf("compiling the AsyncAPI 3.0.0 schema: %v", err)
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		t.Fatal(err)
	}
	return sch.Validate(v)
}

// The document is valid under the official AsyncAPI 3.0.0 JSON Schema:
// the document's structure, its keys, and its AMQP bindings (the schema
// checks bindings of version 0.3.0 against theirs). The schema is known
// to catch what matters: a document with a binding of the wrong type
// fails it. It does not check the keys of channels, operations or
// components (TestKeysAreAsyncAPIs does).
func TestDocumentIsValidAsyncAPI(t *testing.T) {
	t.Parallel()
	doc, err := asyncapi.Document(testSet(t), testStream())
	if err != nil {
		t.Fatal(err)
	}
	if err := validate(t, doc); err != nil {
		t.Fatalf("the document is not valid AsyncAPI 3.0.0: %v", err)
	}
	for name, breakIt := range map[string]func(string) string{
		"a queue binding with an exchange": func(s string) string {
			return strings.Replace(s, `"is": "queue",`, `"is": "queue", "exchange": {"name": "x"},`, 1)
		},
		"an exchange type AMQP's binding does not have": func(s string) string {
			return strings.Replace(s, `"type": "fanout"`, `"type": "x-consistent-hash"`, 1)
		},
		"a message type that is not a string": func(s string) string {
			return strings.Replace(s, `"messageType": "invoice.paid"`, `"messageType": 1`, 1)
		},
		"an operation without an action": func(s string) string {
			return strings.Replace(s, `"action": "send",`, ``, 1)
		},
	} {
		broken := breakIt(string(doc))
		if broken == string(doc) {
			t.Fatalf("%s: the test's edit did not apply", name)
		}
		if err := validate(t, []byte(broken)); err == nil {
			t.Errorf("%s: the schema passes it; it checks less than the test believes", name)
		}
	}
}

// The official AsyncAPI parser (JavaScript, @asyncapi/parser) parses the
// document without an error: it resolves every $ref, checks the
// operations' messages are their channels', and runs AsyncAPI's own
// rules beyond the JSON Schema. It needs Node.js and the parser, which
// warren does not install: set ASYNCAPI_PARSER_DIR to a node_modules
// directory holding @asyncapi/parser (npm install @asyncapi/parser@3) to
// run it; without it the test is skipped and says so.
func TestDocumentParsesWithTheOfficialParser(t *testing.T) {
	t.Parallel()
	dir := os.Getenv("ASYNCAPI_PARSER_DIR")
	if dir == "" {
		t.Skip("ASYNCAPI_PARSER_DIR is not set: the official parser's check did not run (see the test's comment)")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("ASYNCAPI_PARSER_DIR is set but there is no node: %v", err)
	}
	doc, err := asyncapi.Document(testSet(t), testStream())
	if err != nil {
		t.Fatal(err)
	}
	planes, err := plane.Contracts()
	if err != nil {
		t.Fatal(err)
	}
	planeDoc, err := asyncapi.Document(planes, asyncapi.Stream{Consumers: []asyncapi.Consumer{{Name: "webhook", Handles: []string{"workitem."}}}})
	if err != nil {
		t.Fatal(err)
	}
	for name, doc := range map[string][]byte{"the test's stream": doc, "awkward names": awkwardDocument(t), "Plane's contracts": planeDoc} {
		file := filepath.Join(t.TempDir(), "asyncapi.json")
		if err := os.WriteFile(file, doc, 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(node, "testdata/parse.cjs", file)
		cmd.Env = append(os.Environ(), "NODE_PATH="+dir)
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "VALID") {
			t.Errorf("%s: the official parser refuses the document (%v):\n%s", name, err, out)
		}
	}
}

// awkwardDocument is a document whose names hold what JSON pointers and
// AsyncAPI's keys cannot.
func awkwardDocument(t testing.TB) []byte {
	t.Helper()
	set := awkwardSet(t)
	doc, err := asyncapi.Document(set, asyncapi.Stream{
		Exchange: "events #1",
		Consumers: []asyncapi.Consumer{
			{Name: "a/b~c", Handles: []string{"odd"}},
			{Name: "a_b_c"},
			{Name: "q#1 ü"},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	var check map[string]any
	if err := json.Unmarshal(doc, &check); err != nil {
		t.Fatal(err)
	}
	return doc
}

// The document is honest about the wire: an event as warren's relays
// encode it, in either envelope format, is valid under its message's
// payload schema read from the document (the contract placed there
// included), and one whose data breaks the contract is not.
func TestDocumentDescribesTheWire(t *testing.T) {
	t.Parallel()
	doc, err := asyncapi.Document(testSet(t), testStream())
	if err != nil {
		t.Fatal(err)
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft7) // AsyncAPI's Schema Object
	c.AssertFormat()
	c.UseLoader(refuseLoads{})
	const loc = "https://asyncapi.warren.invalid/doc.json"
	if err := c.AddResource(loc, v); err != nil {
		t.Fatal(err)
	}
	payload, err := c.Compile(loc + "#/components/messages/workitem.updated.v1.0/payload")
	if err != nil {
		t.Fatal(err)
	}
	ev := warren.Event{
		ID: "e1", Type: "workitem.updated", Version: "1.0", EntityType: "issue", EntityID: "i1",
		CreatedAt: time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC),
		Payload:   warren.Payload{Data: json.RawMessage(`{"name":"Fix the relay","state":{"name":"doing"},"tree":{"label":"root","children":[{"label":"leaf"}]}}`)},
	}
	for _, f := range []warren.Format{warren.FormatWarren, warren.FormatPlane} {
		body, err := warren.Encoder{Format: f}.Encode(ev, 7)
		if err != nil {
			t.Fatal(err)
		}
		inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if err := payload.Validate(inst); err != nil {
			t.Errorf("%s: an event the relay writes is not its message's payload: %v\n%s", f, err, body)
		}
	}
	for name, data := range map[string]string{
		"a tree leaf without its label": `{"name":"x","state":null,"tree":{"label":"root","children":[{}]}}`,
		"no name":                       `{"state":null,"tree":{"label":"root"}}`,
	} {
		bad := ev
		bad.Payload.Data = json.RawMessage(data)
		body, _ := warren.Encoder{}.Encode(bad, 0)
		inst, _ := jsonschema.UnmarshalJSON(bytes.NewReader(body))
		if err := payload.Validate(inst); err == nil {
			t.Errorf("%s: the document's payload schema passes data that breaks the contract", name)
		}
	}
	// The hand-written contract's $ref with a sibling keeps its sibling.
	invoice, err := c.Compile(loc + "#/components/messages/invoice.paid.v1.0/payload")
	if err != nil {
		t.Fatal(err)
	}
	over := warren.Event{ID: "e2", Type: "invoice.paid", Version: "1.0", Payload: warren.Payload{Data: json.RawMessage(`{"amount":150}`)}}
	body, _ := warren.Encoder{}.Encode(over, 0)
	inst, _ := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err := invoice.Validate(inst); err == nil {
		t.Errorf("an amount over the contract's maximum passes: the $ref's sibling was lost")
	}
}
