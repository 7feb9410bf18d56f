package cloudevents

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/warrenmq/warren"
)

// The specification's naming rule, written out again apart from
// legalName: "lower-case letters ('a' to 'z') or digits ('0' to '9') from
// the ASCII character set", and "SHOULD NOT exceed 20 characters".
var specName = regexp.MustCompile(`^[a-z0-9]{1,20}$`)

// mappedNames are the attributes the mapping writes or reads by name.
func mappedNames() []string {
	var names []string
	for _, a := range coreAttrs {
		if a != "data" { // a member of the JSON format, no attribute
			names = append(names, a)
		}
	}
	for _, a := range warrenAttrs {
		names = append(names, a.attr)
	}
	return append(names, extraAttr)
}

// Every attribute name the mapping uses follows the naming rule, and
// within its advised length.
func TestNamesFollowTheSpecification(t *testing.T) {
	names := mappedNames()
	if len(names) != 8+6+1 {
		t.Fatalf("%d names: %v", len(names), names)
	}
	seen := map[string]bool{}
	for _, n := range names {
		if !specName.MatchString(n) {
			t.Errorf("%q breaks the specification's naming rule", n)
		}
		if !legalName(n) || !reserved(n) {
			t.Errorf("%q: legalName %v, reserved %v", n, legalName(n), reserved(n))
		}
		if seen[n] {
			t.Errorf("%q is mapped twice", n)
		}
		seen[n] = true
	}
	for _, n := range []string{"", "ID", "entity_type", "a-b", "é", "cloudEvents:id", "data_base64"} {
		if legalName(n) {
			t.Errorf("legalName(%q) = true", n)
		}
	}
}

// Each of warren's extension attributes is its envelope field's JSON name
// without underscores, and that name is one warren's encoder writes.
func TestWarrenAttributesNameEnvelopeFields(t *testing.T) {
	body, err := warren.Encoder{}.Encode(warren.Event{ID: "e", Type: "t", EntityType: "x", EntityID: "x", WorkspaceID: "x",
		ProjectID: "x", InitiatorID: "x", InitiatorType: "x", Version: "x", CreatedAt: time.Unix(1, 0)}, 0)
	if err != nil {
		t.Fatal(err)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		t.Fatal(err)
	}
	for _, a := range warrenAttrs {
		if a.attr != strings.ReplaceAll(a.field, "_", "") {
			t.Errorf("%s is not %s without underscores", a.attr, a.field)
		}
		if _, ok := fields[a.field]; !ok {
			t.Errorf("warren's envelope has no field %s", a.field)
		}
	}
	for name := range fields {
		if !envelopeField(name) {
			t.Errorf("envelopeFields lacks %s, a field of warren's envelope", name)
		}
	}
}

// The package documentation and docs/cloudevents.md list every attribute
// the mapping uses in their tables.
func TestDocumentedMapping(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile("../docs/cloudevents.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range mappedNames() {
		if !regexp.MustCompile(`(?m)^//\t` + n + ` +\S`).Match(doc) {
			t.Errorf("doc.go's table has no row for %s", n)
		}
		if !strings.Contains(string(md), "\n| `"+n+"` |") {
			t.Errorf("docs/cloudevents.md's table has no row for %s", n)
		}
	}
}
