package plane_test

import (
	"bufio"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/contract"
	"github.com/warrenmq/warren/contract/plane"
)

// planeEvent is a line of testdata/plane-triggers.jsonl: one event of each
// type (and each shape of data) as the reproduction of Plane's triggers
// in outbox/capture's tests wrote it. outbox/capture's tests check every
// event they write, Plane's and warren's, against Contracts as well.
type planeEvent struct {
	Type    string `json:"event_type"`
	Payload struct {
		Data     json.RawMessage `json:"data"`
		Previous json.RawMessage `json:"previous_attributes"`
	} `json:"payload"`
}

func (p planeEvent) event() warren.Event {
	return warren.Event{ID: "e1", Type: p.Type, Version: plane.Version,
		Payload: warren.Payload{Data: p.Payload.Data, PreviousAttributes: p.Payload.Previous}}
}

func readEvents(t *testing.T) []planeEvent {
	t.Helper()
	f, err := os.Open("testdata/plane-triggers.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var evs []planeEvent
	lines := bufio.NewScanner(f)
	lines.Buffer(nil, 1<<20)
	for lines.Scan() {
		var ev planeEvent
		if err := json.Unmarshal(lines.Bytes(), &ev); err != nil {
			t.Fatal(err)
		}
		evs = append(evs, ev)
	}
	if err := lines.Err(); err != nil {
		t.Fatal(err)
	}
	return evs
}

func contracts(t *testing.T) *contract.Set {
	t.Helper()
	s, err := plane.Contracts()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Plane's events, quirks and all (data "{}" as a string on a delete, null
// data on a comment of a missing issue, dates, fractional sort orders),
// keep their contracts; and each decodes into its Go type, as a
// warren.Typed handler would decode it.
func TestPlanesEventsKeepTheirContracts(t *testing.T) {
	t.Parallel()
	s := contracts(t)
	for _, p := range readEvents(t) {
		ev := p.event()
		if err := s.Check(ev); err != nil {
			t.Errorf("%s: %v", p.Type, err)
			continue
		}
		if string(p.Payload.Data) == "null" {
			continue // warren.Typed dead-letters null data, by design
		}
		var err error
		switch typ := p.Type; {
		case strings.HasSuffix(typ, "comment.created"), strings.HasSuffix(typ, "comment.updated"):
			err = ev.Payload.DecodeData(new(plane.Commented))
		case strings.Contains(typ, ".link."):
			err = ev.Payload.DecodeData(new(plane.Link))
		case strings.Contains(typ, ".relation."):
			err = ev.Payload.DecodeData(new(plane.Relation))
		case strings.Contains(typ, ".attachment."):
			err = ev.Payload.DecodeData(new(plane.Attachment))
		case strings.Contains(typ, ".cycle."), strings.Contains(typ, ".module."):
			err = ev.Payload.DecodeData(new(plane.Membership))
		case strings.HasPrefix(typ, "state."):
			err = ev.Payload.DecodeData(new(plane.State))
		case strings.HasPrefix(typ, "label."):
			err = ev.Payload.DecodeData(new(plane.Label))
		default:
			err = ev.Payload.DecodeData(new(plane.WorkItem))
		}
		if err != nil {
			t.Errorf("%s: does not decode into its type: %v", p.Type, err)
		}
	}
}

// The contracts hold what matters to a consumer: a work item without its
// id, a priority Plane does not have, a state of no group Plane knows, a
// soft-deleted row's data that is not an object.
func TestPlaneContractsRefuseWhatPlaneNeverWrites(t *testing.T) {
	t.Parallel()
	s := contracts(t)
	byType := map[string]planeEvent{}
	for _, p := range readEvents(t) {
		if string(p.Payload.Data) != "null" {
			byType[p.Type] = p
		}
	}
	for _, tc := range []struct {
		typ, change, path string
	}{
		{"workitem.updated", `delete id`, "payload.data.id"},
		{"workitem.updated", `set priority "asap"`, "payload.data.priority"},
		{"workitem.created", `set state_id "not-a-uuid"`, "payload.data.state_id"},
		{"workitem.updated", `set assignee_ids "a"`, "payload.data.assignee_ids"},
		{"state.created", `set group "doing"`, "payload.data.group"},
		{"label.created", `set created_at "yesterday"`, "payload.data.created_at"},
	} {
		p, ok := byType[tc.typ]
		if !ok {
			t.Fatalf("testdata has no %s", tc.typ)
		}
		var data map[string]any
		if err := json.Unmarshal(p.Payload.Data, &data); err != nil {
			t.Fatal(err)
		}
		verb, rest, _ := strings.Cut(tc.change, " ")
		field, value, _ := strings.Cut(rest, " ")
		if verb == "delete" {
			delete(data, field)
		} else {
			data[field] = json.RawMessage(value)
		}
		p.Payload.Data, _ = json.Marshal(data)
		err := s.Check(p.event())
		if err == nil || !strings.Contains(err.Error(), tc.path) {
			t.Errorf("%s with %s: %v, want a violation at %s", tc.typ, tc.change, err, tc.path)
		}
	}
	removed := planeEvent{Type: "workitem.deleted"}
	removed.Payload.Data = json.RawMessage(`"gone"`)
	if err := s.Check(removed.event()); err == nil {
		t.Error(`workitem.deleted with data "gone": passed, want a violation (Plane writes "{}")`)
	}
}
