package asyncapi

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
)

// AsyncAPI names components, channels and operations by keys matching
// ^[\w\d\.\-_]+$, and refers to them by JSON pointers, in which / and ~
// are escaped and # ends the document part. An event type or a queue may
// hold any of them ("a b", "a~b", "a#b"), so a key is the name with every
// other character made _, and, where that changed the name or two names
// would share a key, a short hash of the name after it: readable where
// the name allows, unique always.

// namespace hands out the keys of one object of the document (its
// channels, its operations, its messages).
type namespace struct {
	what  string            // "channel", for errors
	names map[string]string // name → key
}

// assign gives each of names (the things' full names, for the hash) a key
// derived from its readable form. The result is the same whatever the
// order of names.
func assign(what string, readable map[string]string) (*namespace, error) {
	ns := &namespace{what: what, names: map[string]string{}}
	byBase := map[string][]string{}
	for name, r := range readable {
		base, changed := sanitize(r)
		if changed {
			base += "_" + shortHash(name)
		}
		byBase[base] = append(byBase[base], name)
	}
	taken := map[string]string{}
	for _, base := range sortedKeys(byBase) {
		names := byBase[base]
		for _, name := range names {
			key := base
			if len(names) > 1 {
				key = base + "_" + shortHash(name)
			}
			ns.names[name] = key
		}
	}
	for _, name := range sortedKeys(ns.names) {
		key := ns.names[name]
		if other, dup := taken[key]; dup {
			return nil, fmt.Errorf("asyncapi: the %ss %q and %q would share the key %s; rename one", what, other, name, key)
		}
		taken[key] = name
	}
	return ns, nil
}

func (ns *namespace) key(name string) string {
	k, ok := ns.names[name]
	if !ok {
		panic(fmt.Sprintf("asyncapi: no key for %s %q", ns.what, name)) // a bug: every name is assigned first
	}
	return k
}

// sanitize makes s a key: every character but ASCII letters, digits, ., -
// and _ becomes _. changed reports whether any did (or s was empty).
func sanitize(s string) (key string, changed bool) {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '-', r == '_':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
			changed = true
		}
	}
	if b.Len() == 0 {
		return "_", true
	}
	return b.String(), changed
}

// shortHash is 8 hex digits of name's SHA-256: enough that two names of
// one stream sharing one is not a concern, short enough to read past.
func shortHash(name string) string {
	sum := sha256.Sum256([]byte(name))
	return hex.EncodeToString(sum[:4])
}
