package asyncapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"
)

// checkRefs resolves every $ref of the document doc within it: what
// Document writes must never send a reader to nothing. It is the check of
// last resort behind the placing of contracts, whose rules should have
// made every reference good.
func checkRefs(doc []byte) error {
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var root any
	if err := dec.Decode(&root); err != nil {
		return fmt.Errorf("asyncapi: the document: %w", err)
	}
	var walk func(v any, at string) error
	walk = func(v any, at string) error {
		switch v := v.(type) {
		case map[string]any:
			if s, ok := v["$ref"].(string); ok {
				if _, err := resolve(root, s); err != nil {
					return fmt.Errorf("asyncapi: the document's %s/$ref %q: %w", at, s, err)
				}
			}
			for _, k := range sortedKeys(v) {
				if err := walk(v[k], at+"/"+escapePointer(k)); err != nil {
					return err
				}
			}
		case []any:
			for i, e := range v {
				if err := walk(e, at+"/"+strconv.Itoa(i)); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return walk(root, "#")
}

// resolve follows the reference s, a fragment of the document itself, as
// JSON Reference and AsyncAPI's parsers read it: the fragment
// percent-decoded, then a JSON pointer.
func resolve(root any, s string) (any, error) {
	frag, ok := strings.CutPrefix(s, "#")
	if !ok {
		return nil, fmt.Errorf("not within the document")
	}
	frag, err := url.PathUnescape(frag)
	if err != nil {
		return nil, err
	}
	if frag == "" {
		return root, nil
	}
	if !strings.HasPrefix(frag, "/") {
		return nil, fmt.Errorf("not a JSON pointer")
	}
	v := root
	for _, tok := range strings.Split(frag[1:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch cur := v.(type) {
		case map[string]any:
			next, ok := cur[tok]
			if !ok {
				return nil, fmt.Errorf("no member %q", tok)
			}
			v = next
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(cur) {
				return nil, fmt.Errorf("no element %q", tok)
			}
			v = cur[i]
		default:
			return nil, fmt.Errorf("%q is inside a value", tok)
		}
	}
	return v, nil
}
