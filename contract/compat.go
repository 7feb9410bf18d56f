package contract

import (
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
)

// Mode is a compatibility mode, as Confluent's Schema Registry defines
// them, applied to one contract (type and version) changed between two
// sets.
type Mode string

const (
	// Backward: a consumer on the new contract reads every event written
	// under the old one (events already in queues and DLQs, or from
	// producers not yet deployed). Deploy consumers first.
	Backward Mode = "backward"
	// Forward: a consumer on the old contract reads every event written
	// under the new one. Deploy producers first.
	Forward Mode = "forward"
	// Full: both.
	Full Mode = "full"
)

// ParseMode reads a Mode by name.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(strings.ToLower(s)); m {
	case Backward, Forward, Full:
		return m, nil
	}
	return "", fmt.Errorf("contract: compatibility mode %q: want backward, forward or full", s)
}

// Break is one change that breaks compatibility.
type Break struct {
	// Contract is the contract changed ("workitem.updated@1.0").
	Contract string
	// Path is where in the event ("payload.data.state.name").
	Path string
	// Reason says why, naming who can no longer read what.
	Reason string
}

func (b Break) String() string { return fmt.Sprintf("%s: %s: %s", b.Contract, b.Path, b.Reason) }

// Compare returns what breaks mode between old and changed, contract by
// contract (same type and version): a contract dropped, or changed so that
// its readers cannot read its writers' events. A contract that is new in
// changed breaks nothing (a new version is read through a consumer's
// declared Reads). The comparison knows the keywords Of writes (type,
// properties, required, additionalProperties, items, enum, const, the
// bounds of numbers, strings and arrays, pattern, format); a difference in
// any other keyword is reported as a break, never passed unseen.
//
// A property the reader has and the writer does not name is taken as
// absent from the writer's events unless the writer's schema says
// additionalProperties false: producers write what their type has, so an
// optional property added is compatible, as Schema Registry treats an open
// content model.
func Compare(old, changed *Set, mode Mode) []Break {
	var out []Break
	for _, o := range old.Contracts() {
		n, ok := changed.contracts[o.Key()]
		if !ok {
			out = append(out, Break{Contract: o.Key(), Path: "payload.data", Reason: "the contract was removed: its consumers no longer have one"})
			continue
		}
		var os, ns any
		json.Unmarshal(o.Schema, &os) // compiled by NewSet: valid JSON
		json.Unmarshal(n.Schema, &ns)
		c := &comparison{contract: o.Key()}
		if mode == Backward || mode == Full {
			c.who = "a consumer on the new contract cannot read events written under the old one"
			c.rRoot, c.wRoot, c.seen = ns, os, map[[2]string]bool{}
			c.compare("payload.data", ns, os)
		}
		if mode == Forward || mode == Full {
			c.who = "a consumer on the old contract cannot read events written under the new one"
			c.rRoot, c.wRoot, c.seen = os, ns, map[[2]string]bool{}
			c.compare("payload.data", os, ns)
		}
		out = append(out, c.breaks...)
	}
	return out
}

type comparison struct {
	contract, who string
	// rRoot and wRoot are the reader's and the writer's whole schemas,
	// for their local $refs; seen holds the pairs of $refs compared on
	// the way down, so that a recursive type is compared once.
	rRoot, wRoot any
	seen         map[[2]string]bool
	breaks       []Break
}

func (c *comparison) add(path, format string, args ...any) {
	c.breaks = append(c.breaks, Break{Contract: c.contract, Path: path, Reason: fmt.Sprintf(format, args...) + ": " + c.who})
}

// known are the keywords compare understands.
var known = map[string]bool{
	"$schema": true, "$id": true, "title": true, "$ref": true, "$defs": true, "definitions": true, "description": true, "$comment": true, "examples": true, "default": true,
	"type": true, "properties": true, "required": true, "additionalProperties": true, "items": true, "enum": true, "const": true,
	"minimum": true, "maximum": true, "exclusiveMinimum": true, "exclusiveMaximum": true, "multipleOf": true,
	"minLength": true, "maxLength": true, "pattern": true, "format": true, "minItems": true, "maxItems": true, "uniqueItems": true,
}

// compare adds the breaks of a reader schema r reading what a writer
// schema w allows, at path.
func (c *comparison) compare(path string, r, w any) {
	r, rnull := nullable(r)
	w, wnull := nullable(w)
	if wnull && !rnull {
		c.add(path, "the writer may write null, the reader does not take it")
	}
	rref, wref := refOf(r), refOf(w)
	if rref != "" || wref != "" {
		// Each pair of definitions is compared once, wherever it is met:
		// a recursive type ends, and a schema whose definitions refer to
		// each other many ways costs no more than its definitions. Only a
		// pair of two definitions: a schema written out in place has no
		// name to remember it by, and two of them against one definition
		// are two comparisons (each is finite, so the recursion ends).
		if rref != "" && wref != "" {
			if c.seen[[2]string{rref, wref}] {
				return
			}
			c.seen[[2]string{rref, wref}] = true
		}
		var ok bool
		if r, ok = resolve(c.rRoot, r); !ok {
			c.add(path, "the reader's $ref %s is not a local definition, and is not checked", rref)
			return
		}
		if w, ok = resolve(c.wRoot, w); !ok {
			c.add(path, "the writer's $ref %s is not a local definition, and is not checked", wref)
			return
		}
	}
	r, w = anything(r), anything(w)
	rm, rok := r.(map[string]any)
	wm, wok := w.(map[string]any)
	if !rok || !wok { // boolean schemas
		if r == false && w != false {
			c.add(path, "the reader accepts nothing here")
		} else if r != true && w == true {
			c.add(path, "the writer allows anything here, the reader does not")
		}
		return
	}
	for k := range rm {
		if !known[k] && !reflect.DeepEqual(expand(c.rRoot, rm[k], nil), expand(c.wRoot, wm[k], nil)) {
			c.add(path, "%s differs, and compatibility under %s is not checked", k, k)
		}
	}
	for k := range wm {
		if !known[k] && rm[k] == nil {
			c.add(path, "%s differs, and compatibility under %s is not checked", k, k)
		}
	}
	if rt := types(rm); rt != nil {
		wt := types(wm)
		if wt == nil {
			c.add(path, "the reader takes only %s, the writer any type", strings.Join(rt, " or "))
		} else {
			for _, t := range wt {
				if !slices.Contains(rt, t) && !(t == "integer" && slices.Contains(rt, "number")) {
					c.add(path, "the writer may write %s, the reader takes %s", t, strings.Join(rt, " or "))
				}
			}
		}
	}
	c.compareValues(path, rm, wm)
	c.compareBounds(path, rm, wm)
	c.compareObject(path, rm, wm)
	if ri, ok := rm["items"]; ok {
		wi, ok := wm["items"]
		if !ok {
			wi = true
		}
		c.compare(path+".[]", ri, wi)
	}
}

// expand returns v with the local $refs in it replaced by what they name,
// a $ref met again inside itself left as it is: two schemas that refer to
// changed definitions under the same names do not compare equal.
func expand(root, v any, open []string) any {
	switch v := v.(type) {
	case map[string]any:
		if ref := refOf(v); ref != "" && !slices.Contains(open, ref) {
			if r, ok := resolve(root, v); ok {
				return expand(root, r, append(open, ref))
			}
		}
		out := make(map[string]any, len(v))
		for k, x := range v {
			out[k] = expand(root, x, open)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = expand(root, x, open)
		}
		return out
	}
	return v
}

// nullable reads the form Of gives a nullable reference, anyOf the
// schema and null, as that schema and whether null is allowed.
func nullable(s any) (any, bool) {
	m, _ := s.(map[string]any)
	any2, _ := m["anyOf"].([]any)
	if len(m) != 1 || len(any2) != 2 {
		return s, false
	}
	for i, alt := range any2 {
		if a, _ := alt.(map[string]any); len(a) == 1 && a["type"] == "null" {
			return any2[1-i], true
		}
	}
	return s, false
}

// refOf returns a schema's $ref, if it has one.
func refOf(s any) string {
	m, _ := s.(map[string]any)
	ref, _ := m["$ref"].(string)
	return ref
}

// resolve returns the schema s refers to with a local $ref ("#/$defs/X",
// "#/definitions/X"), merged with s's other keywords, or s itself when it
// has no $ref. It reports false for any other $ref.
func resolve(root, s any) (any, bool) {
	m, _ := s.(map[string]any)
	ref, ok := m["$ref"].(string)
	if !ok {
		return s, true
	}
	var target any
	for _, prefix := range []string{"#/$defs/", "#/definitions/"} {
		if name, ok := strings.CutPrefix(ref, prefix); ok {
			rm, _ := root.(map[string]any)
			defs, _ := rm[strings.Trim(prefix[1:], "/")].(map[string]any)
			target, ok = defs[name]
			if !ok {
				return nil, false
			}
		}
	}
	if target == nil {
		return nil, false
	}
	merged := map[string]any{}
	if t, ok := target.(map[string]any); ok {
		for k, v := range t {
			merged[k] = v
		}
	} else if target == false {
		return false, true
	}
	for k, v := range m {
		if k != "$ref" {
			merged[k] = v
		}
	}
	return merged, true
}

// anything turns the empty schema into true, which it means.
func anything(s any) any {
	if m, ok := s.(map[string]any); ok && len(m) == 0 {
		return true
	}
	return s
}

func types(m map[string]any) []string {
	switch t := m["type"].(type) {
	case string:
		return []string{t}
	case []any:
		var out []string
		for _, v := range t {
			if s, ok := v.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}

// compareValues: enum and const.
func (c *comparison) compareValues(path string, rm, wm map[string]any) {
	allowed := func(m map[string]any) ([]any, bool) {
		if v, ok := m["const"]; ok {
			return []any{v}, true
		}
		if e, ok := m["enum"].([]any); ok {
			return e, true
		}
		return nil, false
	}
	rv, rlimited := allowed(rm)
	if !rlimited {
		return
	}
	wv, wlimited := allowed(wm)
	if !wlimited {
		c.add(path, "the reader takes only %s, the writer any value", jsonList(rv))
		return
	}
	for _, v := range wv {
		if !slices.ContainsFunc(rv, func(x any) bool { return reflect.DeepEqual(x, v) }) {
			c.add(path, "the writer may write %s, which the reader does not take", jsonList([]any{v}))
		}
	}
}

func jsonList(vs []any) string {
	b, _ := json.Marshal(vs)
	return string(b)
}

// compareBounds: a reader's bound the writer does not keep within.
func (c *comparison) compareBounds(path string, rm, wm map[string]any) {
	lower := []string{"minimum", "exclusiveMinimum", "minLength", "minItems"}
	upper := []string{"maximum", "exclusiveMaximum", "maxLength", "maxItems"}
	for _, k := range append(lower, upper...) {
		rb, ok := number(rm[k])
		if !ok {
			continue
		}
		wb, ok := number(wm[k])
		tighter := !ok || slices.Contains(lower, k) && wb < rb || slices.Contains(upper, k) && wb > rb
		if tighter {
			c.add(path, "the reader's %s %v is tighter than the writer's (%v)", k, rb, wm[k])
		}
	}
	for _, k := range []string{"pattern", "format", "multipleOf", "uniqueItems"} {
		if rv, ok := rm[k]; ok && !reflect.DeepEqual(rv, wm[k]) {
			c.add(path, "the reader's %s %v is not the writer's (%v)", k, rv, wm[k])
		}
	}
}

func number(v any) (float64, bool) {
	f, ok := v.(float64)
	return f, ok
}

// compareObject: properties, required, additionalProperties.
func (c *comparison) compareObject(path string, rm, wm map[string]any) {
	rp, _ := rm["properties"].(map[string]any)
	wp, _ := wm["properties"].(map[string]any)
	wreq := stringSet(wm["required"])
	for _, name := range slices.Sorted(maps.Keys(stringSet(rm["required"]))) {
		if !wreq[name] {
			c.add(path+"."+name, "the reader requires %s, the writer may leave it out", name)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(rp)) {
		if ws, ok := wp[name]; ok {
			c.compare(path+"."+name, rp[name], ws)
		}
	}
	ra, ok := rm["additionalProperties"]
	if !ok {
		ra = true
	}
	wa, ok := wm["additionalProperties"]
	if !ok {
		wa = true
	}
	if ra != true {
		for _, name := range slices.Sorted(maps.Keys(wp)) {
			if _, ok := rp[name]; !ok {
				if ra == false {
					c.add(path+"."+name, "the writer may write %s, the reader takes no property it does not name", name)
				} else {
					c.compare(path+"."+name, ra, wp[name])
				}
			}
		}
	}
	// The members neither names (a map's values): the reader's
	// additionalProperties reads the writer's.
	if rm["type"] == "object" || wm["type"] == "object" || rm["additionalProperties"] != nil || wm["additionalProperties"] != nil {
		c.compare(path+".*", ra, wa)
	}
}

func stringSet(v any) map[string]bool {
	out := map[string]bool{}
	list, _ := v.([]any)
	for _, x := range list {
		if s, ok := x.(string); ok {
			out[s] = true
		}
	}
	return out
}
