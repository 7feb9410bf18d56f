package cdc

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/warrenmq/warren/outbox"
)

func relation(names ...string) *pglogrepl.RelationMessage {
	rel := &pglogrepl.RelationMessage{Namespace: "public", RelationName: "t"}
	for _, n := range names {
		oid := uint32(pgtype.TextOID)
		if strings.HasSuffix(n, "_at") {
			oid = pgtype.TimestamptzOID
		}
		rel.Columns = append(rel.Columns, &pglogrepl.RelationMessageColumn{Name: n, DataType: oid})
	}
	return rel
}

func tuple(values ...string) *pglogrepl.TupleData {
	td := &pglogrepl.TupleData{}
	for _, v := range values {
		c := &pglogrepl.TupleDataColumn{DataType: pglogrepl.TupleDataTypeText, Data: []byte(v)}
		switch v {
		case "<null>":
			c = &pglogrepl.TupleDataColumn{DataType: pglogrepl.TupleDataTypeNull}
		case "<toast>":
			c = &pglogrepl.TupleDataColumn{DataType: pglogrepl.TupleDataTypeToast}
		}
		td.Columns = append(td.Columns, c)
	}
	return td
}

func TestDecodeTuple(t *testing.T) {
	t.Parallel()
	rel := relation("id", "event_id", "event_type", "project_id", "payload", "created_at", "state", "attempts", "a_new_column")
	row, err := decodeTuple(pgtype.NewMap(), rel, tuple("42", "ev-1", "workitem.updated", "<null>", `{"data":{"a":1}}`,
		"2026-12-01 23:17:00.123456+00", "pending", "3", "ignored"))
	if err != nil || row.DecodeErr != nil {
		t.Fatalf("decode: %v, %v", err, row.DecodeErr)
	}
	want := time.Date(2026, 12, 1, 23, 17, 0, 123456000, time.UTC)
	if row.ID != 42 || row.Event.ID != "ev-1" || row.Event.Type != "workitem.updated" || row.Event.ProjectID != "" ||
		!row.Event.CreatedAt.Equal(want) || row.State != outbox.Pending || row.Attempts != 3 || string(row.Event.Payload.Data) != `{"a":1}` {
		t.Errorf("decoded %+v", row)
	}

	// A value the row cannot hold makes the event dead, not the stream stop.
	row, err = decodeTuple(pgtype.NewMap(), rel, tuple("43", "ev-2", "t", "<null>", `{"data":1}`, "infinity", "pending", "0", ""))
	if err != nil || row.DecodeErr == nil || !strings.Contains(row.DecodeErr.Error(), "created_at is infinity") {
		t.Errorf("an infinite created_at: err %v, DecodeErr %v", err, row.DecodeErr)
	}

	// An update that left a large value out must be read from the table.
	// The columns around it are still read: the relay skips an update
	// to a state other than pending without reading the row.
	row, err = decodeTuple(pgtype.NewMap(), rel, tuple("44", "ev-3", "t", "<null>", "<toast>", "2026-12-01 00:00:00+00", "dead", "0", ""))
	if !errors.Is(err, errUnchangedToast) || row.ID != 44 || row.State != outbox.Dead {
		t.Errorf("unchanged TOAST: %v, row %+v", err, row)
	}

	if _, err := decodeTuple(pgtype.NewMap(), rel, tuple("45")); err == nil {
		t.Error("a tuple shorter than its relation was accepted")
	}
}

// take hands the publisher whole prefixes of the stream, at most max rows,
// with the transaction ends among them, so the position it settles is
// never past a row it did not take.
func TestQueueTake(t *testing.T) {
	t.Parallel()
	q := newQueue(100)
	row := func() item { return item{row: &outbox.Row{}} }
	for _, it := range []item{row(), row(), {end: 10}, row(), {end: 20}, {end: 30}, row()} {
		q.push(it)
	}
	got := q.take(2)
	if len(got) != 3 || got[2].end != 10 {
		t.Fatalf("take(2) = %+v, want two rows and the end 10", got)
	}
	// The ends 20 and 30 in a row are one, at 30: markers that pile up
	// while the publisher is held up do not grow the queue.
	got = q.take(2)
	if len(got) != 3 || got[1].end != 30 || got[2].row == nil {
		t.Fatalf("second take(2) = %+v, want a row, the end 30, and a row", got)
	}
	if got := q.take(2); len(got) != 0 {
		t.Fatalf("take of an empty queue = %+v", got)
	}
	for range 100 {
		q.push(row())
	}
	if !q.full() {
		t.Error("a queue holding its limit of rows is not full")
	}
}

// The ledger keeps an event's first nack until it is forgotten, and when
// full makes room by dropping entries far older than the timeout, never
// the ones still being counted.
func TestNackLedger(t *testing.T) {
	t.Parallel()
	var l nackLedger
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if first := l.nacked(1, t0, time.Minute); !first.Equal(t0) {
		t.Fatalf("first nack at %v, want %v", first, t0)
	}
	if first := l.nacked(1, t0.Add(10*time.Second), time.Minute); !first.Equal(t0) {
		t.Fatalf("second nack: since %v, want the first's %v", first, t0)
	}
	l.forget(1)
	if first := l.nacked(1, t0.Add(20*time.Second), time.Minute); !first.Equal(t0.Add(20 * time.Second)) {
		t.Fatalf("after forget: since %v, want the new nack's time", first)
	}
	// Full: the stale entries go, the fresh ones stay.
	for id := int64(2); len(l.since) < nackLedgerMax; id++ {
		l.nacked(id, t0, time.Minute)
	}
	l.since[1] = t0.Add(3 * time.Minute) // still counted
	later := t0.Add(3 * time.Minute)
	if first := l.nacked(-1, later, time.Minute); !first.Equal(later) {
		t.Fatalf("new entry in a full ledger: since %v", first)
	}
	if _, ok := l.since[1]; !ok {
		t.Error("a fresh entry was dropped to make room")
	}
	if _, ok := l.since[-1]; !ok || len(l.since) != 2 {
		t.Errorf("the ledger holds %d entries after making room, want the fresh one and the new one", len(l.since))
	}
}

// Cleared, the ledger counts an event's nacks from its next one.
func TestNackLedgerClear(t *testing.T) {
	t.Parallel()
	var l nackLedger
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l.nacked(7, t0, time.Minute)
	l.clear()
	if first := l.nacked(7, t0.Add(time.Hour), time.Minute); !first.Equal(t0.Add(time.Hour)) {
		t.Fatalf("after clear: since %v, want the new nack's time", first)
	}
}
