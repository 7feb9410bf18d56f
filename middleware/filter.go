package middleware

import (
	"context"
	"fmt"
	"strings"

	"github.com/warrenmq/warren"
)

// PrefixFilter passes on the events whose type starts with one of prefixes
// ("workitem." passes "workitem.updated") and answers every other event with
// [warren.Skip], which the consumer acknowledges and counts as skipped.
// Matching is case-sensitive, like event types.
//
// PrefixFilter panics without prefixes or with an empty one: an empty prefix
// would pass every event, which is what leaving the filter out says more
// clearly.
func PrefixFilter(prefixes ...string) warren.Middleware {
	prefixes = checkPrefixes("PrefixFilter", prefixes)
	return func(next warren.Handler) warren.Handler {
		return warren.HandlerFunc(func(ctx context.Context, m *warren.Message) error {
			if _, ok := matchPrefix(m.Event.Type, prefixes); !ok {
				return warren.Skip(fmt.Sprintf("event type %q matches none of %q", m.Event.Type, prefixes))
			}
			return next.Handle(ctx, m)
		})
	}
}

// SkipInitiators answers with [warren.Skip] the events whose initiator type
// starts with one of prefixes, and passes on the rest. Without prefixes it
// skips "SYSTEM." ([warren.InitiatorSystemPrefix]): events a system actor —
// an import, an automation — caused. That is the loop-breaker for a consumer
// whose handler itself emits events: its own output comes back marked
// SYSTEM.* and stops here. An event without an initiator type is passed on;
// it is not known to come from a system actor.
//
// SkipInitiators panics on an empty prefix, which would skip every event.
func SkipInitiators(prefixes ...string) warren.Middleware {
	if len(prefixes) == 0 {
		prefixes = []string{warren.InitiatorSystemPrefix}
	}
	prefixes = checkPrefixes("SkipInitiators", prefixes)
	return func(next warren.Handler) warren.Handler {
		return warren.HandlerFunc(func(ctx context.Context, m *warren.Message) error {
			if p, ok := matchPrefix(m.Event.InitiatorType, prefixes); ok {
				return warren.Skip(fmt.Sprintf("initiator type %q starts with %q", m.Event.InitiatorType, p))
			}
			return next.Handle(ctx, m)
		})
	}
}

func checkPrefixes(fn string, prefixes []string) []string {
	if len(prefixes) == 0 {
		panic("middleware: " + fn + " needs at least one prefix")
	}
	for i, p := range prefixes {
		if p == "" {
			panic(fmt.Sprintf("middleware: %s: prefix %d of %d is empty", fn, i+1, len(prefixes)))
		}
	}
	return append([]string(nil), prefixes...)
}

func matchPrefix(s string, prefixes []string) (string, bool) {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return p, true
		}
	}
	return "", false
}
