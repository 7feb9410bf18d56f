package contract

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/warrenmq/warren"
)

// Reads declares what a consumer reads of one event type: its handler
// takes Version, and each Upcast turns one older version into a newer
// one, so that every version it names reaches Version.
type Reads struct {
	Type    string
	Version string
	Upcasts []Upcast
}

// Upcast turns the payload data of From into that of To (a renamed field
// moved, a new required one given its default). It must not keep data:
// it is called once per delivery, retries included.
type Upcast struct {
	From, To string
	Func     func(data json.RawMessage) (json.RawMessage, error)
}

// Reader returns a middleware that hands next every event of the types in
// reads at the version its handler takes. An event of an older version is
// upcast along the chain (each step's data checked against its version's
// contract, where the set has one) and handed on with Event.Version and
// Event.Payload.Data replaced; Message.Body stays as it arrived, so a
// retry or a dead letter carries what the producer sent. An event of a
// version the consumer does not read, data that breaks a contract on the
// way, or an upcast that fails, is dead-lettered as undecodable, naming
// the versions it reads. Events of other types are checked with
// CheckKnown. The declarations are checked here: a version reached twice,
// a cycle, or an upcast that leads nowhere, is an error.
func (s *Set) Reader(reads ...Reads) (warren.Middleware, error) {
	byType := map[string]*readPlan{}
	for _, r := range reads {
		if err := checkName(r.Type, r.Version); err != nil {
			return nil, err
		}
		if byType[r.Type] != nil {
			return nil, fmt.Errorf("contract: reads of %s declared twice", r.Type)
		}
		p, err := plan(r)
		if err != nil {
			return nil, err
		}
		byType[r.Type] = p
	}
	return func(next warren.Handler) warren.Handler {
		return warren.HandlerFunc(func(ctx context.Context, m *warren.Message) error {
			p := byType[m.Event.Type]
			if p == nil {
				if err := s.CheckKnown(m.Event); err != nil {
					return warren.Undecodable(err)
				}
				return next.Handle(ctx, m)
			}
			ev, err := s.read(p, m.Event)
			if err != nil {
				return warren.Undecodable(err)
			}
			m.Event = ev
			return next.Handle(ctx, m)
		})
	}, nil
}

// readPlan is one type's declared reading: each older version's upcast.
type readPlan struct {
	typ, version string
	from         map[string]Upcast
	versions     []string // every version read, for errors
}

func plan(r Reads) (*readPlan, error) {
	p := &readPlan{typ: r.Type, version: r.Version, from: map[string]Upcast{}}
	for _, u := range r.Upcasts {
		if err := checkName(r.Type, u.From); err != nil {
			return nil, err
		}
		if err := checkName(r.Type, u.To); err != nil {
			return nil, err
		}
		switch {
		case u.Func == nil:
			return nil, fmt.Errorf("contract: %s upcast %s → %s has no Func", r.Type, u.From, u.To)
		case u.From == r.Version:
			return nil, fmt.Errorf("contract: %s upcast from %s, the version the handler takes", r.Type, u.From)
		case p.from[u.From].Func != nil:
			return nil, fmt.Errorf("contract: %s: two upcasts from %s", r.Type, u.From)
		}
		p.from[u.From] = u
	}
	for from := range p.from {
		seen := map[string]bool{}
		for v := from; v != r.Version; v = p.from[v].To {
			if seen[v] {
				return nil, fmt.Errorf("contract: %s: the upcasts from %s go round in a circle", r.Type, from)
			}
			seen[v] = true
			if _, ok := p.from[v]; !ok {
				return nil, fmt.Errorf("contract: %s: the upcasts from %s stop at %s, short of %s", r.Type, from, v, r.Version)
			}
		}
		p.versions = append(p.versions, from)
	}
	slices.Sort(p.versions)
	p.versions = append([]string{r.Version}, p.versions...)
	return p, nil
}

// read checks ev and brings it to the plan's version.
func (s *Set) read(p *readPlan, ev warren.Event) (warren.Event, error) {
	if ev.Version != p.version {
		if _, ok := p.from[ev.Version]; !ok {
			return ev, fmt.Errorf("contract: event %.80q is %s at version %.40q; this consumer reads %s: %w",
				ev.ID, p.typ, ev.Version, strings.Join(p.versions, ", "), warren.ErrInvalidEvent)
		}
	}
	for ev.Version != p.version {
		if err := s.CheckKnown(ev); err != nil {
			return ev, err
		}
		u := p.from[ev.Version]
		data, err := upcast(u, ev.Payload.Data)
		if err != nil {
			return ev, fmt.Errorf("contract: upcast of %s from %s to %s: %w: %w", p.typ, u.From, u.To, err, warren.ErrInvalidEvent)
		}
		ev.Version, ev.Payload.Data = u.To, data
	}
	return ev, s.CheckKnown(ev)
}

// upcast runs u on a copy of data: payload.data shares the message body's
// array, and an upcast that appended to its input would write over the
// body that retries and dead letters carry. A panic is the upcast's
// failure on this event, which no retry changes.
func upcast(u Upcast, data json.RawMessage) (out json.RawMessage, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panicked: %v", p)
		}
	}()
	return u.Func(slices.Clip(slices.Clone(data)))
}
