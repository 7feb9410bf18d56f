package consumer

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/warrenmq/warren"
)

// router sends each message to the handler registered for the longest
// prefix of its event type.
type router struct {
	routes    []route // longest prefix first
	unhandled UnhandledPolicy
}

type route struct {
	prefix  string
	handler warren.Handler
}

func (r *router) add(prefix string, h warren.Handler) error {
	if h == nil {
		return fmt.Errorf("consumer: nil handler for prefix %q", prefix)
	}
	for _, existing := range r.routes {
		if existing.prefix == prefix {
			return fmt.Errorf("consumer: a handler for prefix %q is already registered", prefix)
		}
	}
	r.routes = append(r.routes, route{prefix, h})
	sort.SliceStable(r.routes, func(i, j int) bool { return len(r.routes[i].prefix) > len(r.routes[j].prefix) })
	return nil
}

func (r *router) match(eventType string) warren.Handler {
	for _, rt := range r.routes {
		if strings.HasPrefix(eventType, rt.prefix) {
			return rt.handler
		}
	}
	return nil
}

// prefixes returns the registered prefixes, longest first.
func (r *router) prefixes() []string {
	out := make([]string, len(r.routes))
	for i, rt := range r.routes {
		out[i] = rt.prefix
	}
	return out
}

// UnhandledError is the error for an event no registered handler matches,
// under [DeadLetterUnhandled].
type UnhandledError struct{ EventType string }

func (e *UnhandledError) Error() string {
	return fmt.Sprintf("no handler registered for event type %q", e.EventType)
}

func (r *router) Handle(ctx context.Context, m *warren.Message) error {
	if h := r.match(m.Event.Type); h != nil {
		return h.Handle(ctx, m)
	}
	if r.unhandled == DeadLetterUnhandled {
		return warren.Permanent(&UnhandledError{EventType: m.Event.Type})
	}
	return warren.Skip(fmt.Sprintf("no handler for event type %q", m.Event.Type))
}
