package outboxtest

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/internal/outboxsql"
	"github.com/warrenmq/warren/outbox"
)

// Events returns the events in the outbox table that tx sees, in the order
// they were written. table nil means the default table, the one
// [outbox.Publish] writes to.
func Events(ctx context.Context, tx pgx.Tx, table *outbox.Table) ([]warren.Event, error) {
	if table == nil {
		var err error
		if table, err = outbox.New(""); err != nil {
			return nil, err
		}
	}
	// Plane's columns without warren's optional ones: enough for the
	// events, and read on a Plane table migrated or not.
	q := `SELECT ` + outboxsql.RowColumns(table, false) + ` FROM ` + pgx.Identifier{table.Name()}.Sanitize() + ` ORDER BY id`
	rows, err := tx.Query(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("outboxtest: read outbox %s: %w", table.Name(), err)
	}
	defer rows.Close()
	var out []warren.Event
	for rows.Next() {
		r, err := outboxsql.ScanRow[outbox.Row](rows)
		if err != nil {
			return nil, fmt.Errorf("outboxtest: read outbox %s: %w", table.Name(), err)
		}
		if r.DecodeErr != nil {
			return nil, fmt.Errorf("outboxtest: read outbox %s: %w", table.Name(), r.DecodeErr)
		}
		out = append(out, r.Event)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("outboxtest: read outbox %s: %w", table.Name(), err)
	}
	return out, nil
}

// Match says which event [RequireEvent] looks for. Every field that is
// set must equal the event's; the zero Match matches any event.
type Match struct {
	ID         string // event_id
	Type       string // event_type
	EntityType string
	EntityID   string

	// Table is the outbox table to look in; nil means the default table.
	Table *outbox.Table
}

// filter returns the events of evs that m matches.
func (m Match) filter(evs []warren.Event) []warren.Event {
	var out []warren.Event
next:
	for _, ev := range evs {
		for _, f := range [][2]string{{m.ID, ev.ID}, {m.Type, ev.Type}, {m.EntityType, ev.EntityType}, {m.EntityID, ev.EntityID}} {
			if f[0] != "" && f[0] != f[1] {
				continue next
			}
		}
		out = append(out, ev)
	}
	return out
}

func (m Match) String() string {
	var parts []string
	for _, f := range [][2]string{{"event_id", m.ID}, {"event_type", m.Type}, {"entity_type", m.EntityType}, {"entity_id", m.EntityID}} {
		if f[1] != "" {
			parts = append(parts, fmt.Sprintf("%s=%q", f[0], f[1]))
		}
	}
	if len(parts) == 0 {
		return "any event"
	}
	return strings.Join(parts, " ")
}

// RequireEvent fails tb unless tx sees exactly one outbox event matching
// m, and returns that event so the test can check its payload. Two
// matching events fail too: a test that meant one write should hear of a
// second. The failure lists the events tx does see.
func RequireEvent(ctx context.Context, tb testing.TB, tx pgx.Tx, m Match) warren.Event {
	tb.Helper()
	evs, err := Events(ctx, tx, m.Table)
	if err != nil {
		tb.Fatalf("%v", err)
		return warren.Event{}
	}
	found := m.filter(evs)
	if len(found) != 1 {
		tb.Fatalf("outboxtest: want one outbox event with %v, found %d among %d: %s", m, len(found), len(evs), summary(evs))
		return warren.Event{}
	}
	return found[0]
}

// RequireNoEvent fails tb if tx sees an outbox event matching m.
func RequireNoEvent(ctx context.Context, tb testing.TB, tx pgx.Tx, m Match) {
	tb.Helper()
	evs, err := Events(ctx, tx, m.Table)
	if err != nil {
		tb.Fatalf("%v", err)
		return
	}
	found := m.filter(evs)
	if len(found) > 0 {
		tb.Fatalf("outboxtest: want no outbox event with %v, found %d: %s", m, len(found), summary(found))
	}
}

// summary names up to ten events by id, type and entity.
func summary(evs []warren.Event) string {
	if len(evs) == 0 {
		return "none"
	}
	var b strings.Builder
	for i, ev := range evs {
		if i == 10 {
			fmt.Fprintf(&b, "; and %d more", len(evs)-i)
			break
		}
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%s %s %s/%s", ev.ID, ev.Type, ev.EntityType, ev.EntityID)
	}
	return b.String()
}
