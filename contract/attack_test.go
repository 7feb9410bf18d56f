package contract_test

// What an attack on the package with a fresh context found (2026-12-07),
// each fixed: every test failed before its fix.

import (
	"context"
	"encoding/json"
	"fmt"
	"math/big"
	"net/netip"
	"net/url"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/consumer"
	"github.com/warrenmq/warren/consumer/consumertest"
	"github.com/warrenmq/warren/contract"
	"github.com/warrenmq/warren/dlq"
)

func checkOne(t *testing.T, c contract.Contract, data string) error {
	t.Helper()
	return newSet(t, c).Check(ev(c.Type, c.Version, data))
}

func rawContract(schema string) contract.Contract {
	return contract.Contract{Type: "t", Version: "1", Schema: json.RawMessage(schema)}
}

func breaksByMode(t *testing.T, old, neu contract.Contract) map[contract.Mode]int {
	out := map[contract.Mode]int{}
	for _, m := range []contract.Mode{contract.Backward, contract.Forward, contract.Full} {
		out[m] = len(contract.Compare(newSet(t, old), newSet(t, neu), m))
	}
	return out
}

// An upcast that appends to its input cannot write into the message's
// body, which retries and dead letters carry.
func TestAnUpcastCannotChangeTheBody(t *testing.T) {
	s := newSet(t)
	read, _ := s.Reader(contract.Reads{Type: "item.updated", Version: "2.0", Upcasts: []contract.Upcast{{From: "1.0", To: "2.0",
		Func: func(d json.RawMessage) (json.RawMessage, error) { return append(d[:len(d)-1], `,"p":"none"}`...), nil }}}})
	body := []byte(`{"event_id":"e1","event_type":"item.updated","version":"1.0","payload":{"data":{"name":"x"},"previous_attributes":null}}`)
	orig := string(body)
	e, _ := warren.DecodeEvent(body)
	m := &warren.Message{Event: e, Body: body}
	read(warren.HandlerFunc(func(context.Context, *warren.Message) error { return nil })).Handle(context.Background(), m)
	if string(m.Body) != orig {
		t.Errorf("Message.Body changed:\n%s", m.Body)
	}
}

type ownTypes struct {
	Labels []string       `json:"labels"`
	Meta   map[string]int `json:"meta"`
	Est    *int           `json:"estimate"`
	Num    json.Number    `json:"num"`
	Addr   netip.Addr     `json:"addr"`
	Big    *big.Int       `json:"big"`
}

// A value of the contract's own Go type passes its contract as
// encoding/json writes it: nil slices, maps and pointers (null), a
// json.Number, types with their own MarshalText or MarshalJSON.
func TestTheGoTypesOwnValuesPass(t *testing.T) {
	p, err := warren.PayloadOf(ownTypes{Num: "1", Addr: netip.MustParseAddr("10.0.0.1"), Big: big.NewInt(5)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkOne(t, contract.MustOf[ownTypes]("t", "1"), string(p.Data)); err != nil {
		t.Errorf("%s: %v", p.Data, err)
	}
}

// Two nested types of one name from different packages are two
// definitions.
func TestTypesOfOneNameFromTwoPackages(t *testing.T) {
	c := contract.MustOf[struct {
		A url.Error  `json:"a"`
		B exec.Error `json:"b"`
	}]("t", "1")
	if err := checkOne(t, c, `{"a":{"Op":"o","URL":"u","Err":null},"b":{"Name":"n","Err":null}}`); err != nil {
		t.Errorf("exec.Error checked against url.Error's schema: %v", err)
	}
}

// Breaking changes Compare passed before: a map's values, a definition
// changed under a keyword it does not read (oneOf).
func TestCompareSeesThroughMapsAndReferences(t *testing.T) {
	for name, pair := range map[string][2]contract.Contract{
		"map[string]int -> map[string]string": {contract.MustOf[struct {
			M map[string]int `json:"m"`
		}]("t", "1"), contract.MustOf[struct {
			M map[string]string `json:"m"`
		}]("t", "1")},
		"oneOf over a $def that changed": {
			rawContract(`{"type":"object","$defs":{"A":{"type":"object","properties":{"n":{"type":"integer"}}}},"properties":{"x":{"oneOf":[{"$ref":"#/$defs/A"},{"type":"string"}]}}}`),
			rawContract(`{"type":"object","$defs":{"A":{"type":"object","required":["m"],"properties":{"n":{"type":"string"}}}},"properties":{"x":{"oneOf":[{"$ref":"#/$defs/A"},{"type":"string"}]}}}`)},
	} {
		if b := breaksByMode(t, pair[0], pair[1]); b[contract.Full] == 0 {
			t.Errorf("%s: no break under full (%v)", name, b)
		}
	}
	// Another draft's keywords mean other things: refused, not misread.
	if _, err := contract.NewSet(rawContract(`{"$schema":"http://json-schema.org/draft-04/schema#","properties":{"n":{"maximum":10,"exclusiveMaximum":true}}}`)); err == nil {
		t.Error("a draft-04 contract was accepted")
	}
}

type formatted struct {
	When  time.Time `json:"when"`
	Email string    `json:"email" jsonschema:"format=email"`
	N     int       `json:"n"`
	U     uint8     `json:"u"`
}

// Check refuses what the Go type cannot take: a format it asserts, a
// sized integer out of range. (JSON Schema takes 1.0 and integers past
// int64 as integers; Go does not: docs/contracts.md.)
func TestCheckAssertsFormatsAndRanges(t *testing.T) {
	c := contract.MustOf[formatted]("t", "1")
	for _, d := range []string{
		`{"when":"yesterday","email":"a@b.c","n":1,"u":1}`,
		`{"when":"2024-01-01T00:00:00Z","email":"not an email","n":1,"u":1}`,
		`{"when":"2024-01-01T00:00:00Z","email":"a@b.c","n":1,"u":300}`,
	} {
		var v formatted
		decodeErr := warren.Payload{Data: json.RawMessage(d)}.DecodeData(&v)
		if checkErr := checkOne(t, c, d); checkErr == nil && decodeErr != nil {
			t.Errorf("%s: Check passes, Go decode fails: %v", d, decodeErr)
		}
	}
}

// Plane's text "{}" data (every soft delete) is checked as the object
// warren.Typed reads it as.
func TestPlaneTextDataIsCheckedAsTheObject(t *testing.T) {
	type item struct {
		Name string `json:"name,omitempty"`
	}
	s := newSet(t, contract.MustOf[item]("issue.deleted", "1.0"))
	h := contract.Middleware(s.Check)(warren.Typed(func(context.Context, *warren.Message, item) error { return nil }))
	if err := h.Handle(context.Background(), &warren.Message{Event: ev("issue.deleted", "1.0", `"{}"`)}); err != nil {
		t.Errorf("Plane soft-delete data: %v (warren.Typed alone takes it)", err)
	}
}

// A violation never quotes the event's value: it would reach logs,
// dead-letter headers and signatures, however large or secret.
func TestViolationsQuoteNoValue(t *testing.T) {
	type s struct {
		Note string `json:"note" jsonschema:"pattern=^[a-z]+$"`
	}
	err := checkOne(t, contract.MustOf[s]("t", "1"), `{"note":"SECRET`+strings.Repeat("x", 1<<20)+`"}`)
	if len(err.Error()) > 4096 || strings.Contains(err.Error(), "SECRET") {
		t.Errorf("violation text is %d bytes and quotes the value", len(err.Error()))
	}
	sig := dlq.Signature(dlq.ClassUndecodable, warren.Undecodable(err).Error())
	if strings.Contains(sig, "SECRET") {
		t.Errorf("the signature quotes the value (%d bytes)", len(sig))
	}
}

// A missing member is named in the path, so dead letters group by it.
// (The version is a number to dlq's signatures: 1.0 and 2.0 share one.)
func TestMissingMembersGroupByName(t *testing.T) {
	type s struct {
		ID   string `json:"id"`
		Name string `json:"name"`
	}
	set := newSet(t, contract.MustOf[s]("t", "1.0"), contract.MustOf[s]("t", "2.0"))
	sig := func(v, d string) string {
		return dlq.Signature(dlq.ClassUndecodable, warren.Undecodable(set.Check(ev("t", v, d))).Error())
	}
	if a, b := sig("1.0", `{"id":"1"}`), sig("1.0", `{"name":"1"}`); a == b {
		t.Errorf("missing name and missing id share a signature: %q", a)
	}
}

// Compare costs what the definitions cost, not the paths through them:
// 20 levels of two references each was 10s, 22 levels 48s.
func TestCompareOfManyPathsToOneDefinition(t *testing.T) {
	var defs []string
	for i := 0; i < 20; i++ {
		defs = append(defs, fmt.Sprintf(`"D%d":{"type":"object","properties":{"a":{"$ref":"#/$defs/D%d"},"b":{"$ref":"#/$defs/D%d"}}}`, i, i+1, i+1))
	}
	defs = append(defs, `"D20":{"type":"string"}`)
	s := newSet(t, rawContract(`{"$defs":{`+strings.Join(defs, ",")+`},"$ref":"#/$defs/D0"}`))
	start := time.Now()
	contract.Compare(s, s, contract.Full)
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Compare of an unchanged %d-def schema took %v", len(defs), d)
	}
}

type compareOldInline struct {
	A struct {
		N int `json:"n"`
	} `json:"a"`
	B struct {
		N string `json:"n"`
	} `json:"b"`
}

type compareInner struct {
	N int `json:"n"`
}

type compareNewShared struct {
	A compareInner `json:"a"`
	B compareInner `json:"b"`
}

// Two fields written out in place on the writer's side and referring to
// one definition on the reader's are two comparisons: the second field's
// change (b.n from a string to an integer) breaks backward compatibility,
// and the new contract refuses what the old producers wrote. Compare
// remembered the pair by ("definition", "") and skipped it.
func TestCompareTwoInlineWritersAgainstOneDefinition(t *testing.T) {
	old := newSet(t, contract.MustOf[compareOldInline]("x.updated", "1.0"))
	changed := newSet(t, contract.MustOf[compareNewShared]("x.updated", "1.0"))
	if err := changed.Check(ev("x.updated", "1.0", `{"a":{"n":1},"b":{"n":"text"}}`)); err == nil {
		t.Fatal("the new contract takes the old event: the test's premise is gone")
	}
	breaks := contract.Compare(old, changed, contract.Backward)
	if !slices.ContainsFunc(breaks, func(b contract.Break) bool { return b.Path == "payload.data.b.n" }) {
		t.Errorf("b.n went from a string to an integer and Compare says %v", breaks)
	}
}

// A violation's path names a map's keys, which are the producer's data:
// the dead letter's field header is masked as its error text is, so a key
// such as "password=…" reaches neither the headers nor the DLQ tools.
func TestDeadLetterFieldIsMaskedAsTheErrorIs(t *testing.T) {
	type limits struct {
		Limits map[string]int `json:"limits"`
	}
	set := newSet(t, contract.MustOf[limits]("acct.updated", "1.0"))
	c, err := consumer.New(consumer.Config{URL: "amqp://guest:guest@127.0.0.1:5672/", Name: "field-mask", Exchange: "field-mask"})
	if err != nil {
		t.Fatal(err)
	}
	c.Use(contract.Middleware(set.Check))
	c.Handle("acct.", warren.Typed(func(context.Context, *warren.Message, limits) error { return nil }))
	r := consumertest.Deliver(context.Background(), c, consumertest.Delivery{Event: ev("acct.updated", "1.0", `{"limits":{"password=hunter2":"x"}}`)})
	if r.Disposition != consumer.DeadLettered {
		t.Fatalf("disposition %v, want dead-lettered", r.Disposition)
	}
	md := dlq.ParseMetadata(r.Headers)
	if md.Field == "" || strings.Contains(md.Field, "hunter2") || strings.Contains(md.Error, "hunter2") {
		t.Errorf("field %q, error %q: want a field, and the secret in neither", md.Field, md.Error)
	}
}
