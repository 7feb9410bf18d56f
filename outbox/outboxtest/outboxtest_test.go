package outboxtest_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/outbox"
	"github.com/warrenmq/warren/outbox/outboxtest"
)

// recorder is a testing.TB whose Fatalf records the failure instead of
// ending the test, so the helpers' failures can be asserted.
type recorder struct {
	testing.TB
	failures []string
}

func (r *recorder) Fatalf(format string, args ...any) {
	r.failures = append(r.failures, fmt.Sprintf(format, args...))
}

func newTable(t *testing.T) (*outbox.Table, func() pgx.Tx) {
	t.Helper()
	ob := testenv.NewOutboxTable(t)
	begin := func() pgx.Tx {
		tx, err := ob.Pool.Begin(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tx.Rollback(context.Background()) })
		return tx
	}
	return ob.Table, begin
}

func publish(t *testing.T, tx pgx.Tx, ob *outbox.Table, id, typ, entity string) {
	t.Helper()
	_, err := ob.Publish(context.Background(), tx, warren.Event{ID: id, Type: typ, EntityType: "issue", EntityID: entity, InitiatorType: warren.InitiatorUser})
	if err != nil {
		t.Fatal(err)
	}
}

func TestRequireEvent(t *testing.T) {
	ctx := context.Background()
	ob, begin := newTable(t)
	tx := begin()
	publish(t, tx, ob, "a", "issue.closed", "i1")
	publish(t, tx, ob, "b", "issue.closed", "i2")
	publish(t, tx, ob, "c", "issue.opened", "i1")

	var ok recorder
	ok.TB = t
	if ev := outboxtest.RequireEvent(ctx, &ok, tx, outboxtest.Match{Type: "issue.closed", EntityID: "i2", Table: ob}); ev.ID != "b" || len(ok.failures) > 0 {
		t.Errorf("RequireEvent found %q, failures %v; want b and none", ev.ID, ok.failures)
	}
	outboxtest.RequireNoEvent(ctx, &ok, tx, outboxtest.Match{Type: "issue.deleted", Table: ob})
	if len(ok.failures) > 0 {
		t.Errorf("RequireNoEvent failed on an absent event: %v", ok.failures)
	}

	for name, c := range map[string]struct {
		m    outboxtest.Match
		none bool // RequireNoEvent rather than RequireEvent
		want string
	}{
		"missing":   {m: outboxtest.Match{ID: "z", Table: ob}, want: `want one outbox event with event_id="z", found 0 among 3: a issue.closed issue/i1; b`},
		"two":       {m: outboxtest.Match{Type: "issue.closed", Table: ob}, want: "found 2 among 3"},
		"present":   {m: outboxtest.Match{EntityID: "i1", Table: ob}, none: true, want: `want no outbox event with entity_id="i1", found 2: a issue.closed issue/i1; c issue.opened issue/i1`},
		"any event": {m: outboxtest.Match{Table: ob}, none: true, want: "want no outbox event with any event, found 3"},
	} {
		rec := recorder{TB: t}
		if c.none {
			outboxtest.RequireNoEvent(ctx, &rec, tx, c.m)
		} else {
			outboxtest.RequireEvent(ctx, &rec, tx, c.m)
		}
		if len(rec.failures) != 1 || !strings.Contains(rec.failures[0], c.want) {
			t.Errorf("%s: failures %q, want one containing %q", name, rec.failures, c.want)
		}
	}
}

// The helpers read in the test's transaction: they see its own uncommitted
// rows, and a rollback leaves nothing for the next test.
func TestEventsSeeOnlyTheTransaction(t *testing.T) {
	ctx := context.Background()
	ob, begin := newTable(t)
	tx := begin()
	publish(t, tx, ob, "a", "issue.closed", "i1")
	if evs, err := outboxtest.Events(ctx, begin(), ob); err != nil || len(evs) != 0 {
		t.Fatalf("another transaction sees %v, %v; want nothing uncommitted", evs, err)
	}
	if evs, err := outboxtest.Events(ctx, tx, ob); err != nil || len(evs) != 1 || evs[0].ID != "a" {
		t.Fatalf("the writing transaction sees %v, %v; want event a", evs, err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if evs, err := outboxtest.Events(ctx, begin(), ob); err != nil || len(evs) != 0 {
		t.Fatalf("after rollback: %v, %v; want nothing", evs, err)
	}
}

// A missing table is an error, not an empty list that would let
// RequireNoEvent pass.
func TestEventsOfAMissingTable(t *testing.T) {
	_, begin := newTable(t)
	missing, err := outbox.New(testenv.Name(t, "missing"))
	if err != nil {
		t.Fatal(err)
	}
	rec := recorder{TB: t}
	outboxtest.RequireNoEvent(context.Background(), &rec, begin(), outboxtest.Match{Table: missing})
	if len(rec.failures) != 1 || !strings.Contains(rec.failures[0], "does not exist") {
		t.Errorf("failures %q, want one saying the table does not exist", rec.failures)
	}
}

// Events reads Plane's own outbox table too, as Plane's triggers write it.
func TestEventsOfAPlaneTable(t *testing.T) {
	t.Parallel()
	p := testenv.NewPlaneTable(t, true)
	ids := p.Insert(2)
	tx, err := p.Pool.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	evs, err := outboxtest.Events(context.Background(), tx, p.Outbox(outbox.Options{}))
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 2 || evs[0].ID != ids[0] || evs[1].ID != ids[1] || evs[0].Type != "workitem.updated" {
		t.Errorf("events %+v, want the two Plane wrote: %v", evs, ids)
	}
}
