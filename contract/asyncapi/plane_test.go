package asyncapi_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/contract/asyncapi"
	"github.com/warrenmq/warren/contract/plane"
)

// Plane's contracts, real ones with Plane's quirks, make a valid
// document, and every event of contract/plane's fixture (one of each type
// and shape as Plane's triggers write it: data as the string "{}" on a
// delete, null data on a comment whose issue is gone), in Plane's
// envelope as the relays publish it, is valid under its message's payload
// schema in the document.
func TestPlanesContractsDescribeItsEvents(t *testing.T) {
	t.Parallel()
	set, err := plane.Contracts()
	if err != nil {
		t.Fatal(err)
	}
	doc, err := asyncapi.Document(set, asyncapi.Stream{Exchange: "plane.event_stream", Consumers: []asyncapi.Consumer{{Name: "plane.webhook", Handles: []string{"workitem."}}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := validate(t, doc); err != nil {
		t.Fatalf("not valid AsyncAPI 3.0.0: %v", err)
	}
	payloads := payloadSchemas(t, doc)

	f, err := os.Open("../plane/testdata/plane-triggers.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	lines := bufio.NewScanner(f)
	lines.Buffer(nil, 1<<20)
	n := 0
	for lines.Scan() {
		var line struct {
			Type    string `json:"event_type"`
			Payload warren.Payload
		}
		if err := json.Unmarshal(lines.Bytes(), &line); err != nil {
			t.Fatal(err)
		}
		ev := warren.Event{ID: "e1", Type: line.Type, Version: plane.Version, EntityType: "issue", EntityID: "i1", Payload: line.Payload}
		if err := set.Check(ev); err != nil {
			t.Fatalf("the fixture's %s breaks its contract: %v", line.Type, err)
		}
		body, err := warren.Encoder{Format: warren.FormatPlane, Publisher: warren.PublisherInfo{Name: "plane"}}.Encode(ev, int64(n+1))
		if err != nil {
			t.Fatal(err)
		}
		inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		sch := payloads(line.Type + ".v" + plane.Version)
		if err := sch.Validate(inst); err != nil {
			t.Errorf("%s (data %.60s): what the contract passes, the document's payload schema refuses: %v", line.Type, line.Payload.Data, err)
		}
		n++
	}
	if err := lines.Err(); err != nil {
		t.Fatal(err)
	}
	if n < 40 {
		t.Fatalf("read %d events of the fixture", n)
	}
}

// payloadSchemas compiles the payload schemas of doc's messages, as a
// draft-07 validator reads AsyncAPI's Schema Object.
func payloadSchemas(t *testing.T, doc []byte) func(id string) *jsonschema.Schema {
	t.Helper()
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft7)
	c.AssertFormat()
	c.UseLoader(refuseLoads{})
	const loc = "https://asyncapi.warren.invalid/doc.json"
	if err := c.AddResource(loc, v); err != nil {
		t.Fatal(err)
	}
	return func(id string) *jsonschema.Schema {
		t.Helper()
		sch, err := c.Compile(loc + "#/components/messages/" + strings.ReplaceAll(id, "~", "~0") + "/payload")
		if err != nil {
			t.Fatal(err)
		}
		return sch
	}
}
