package outbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/internal/outboxsql"
)

// State is where a row is in its life.
type State string

const (
	// Pending rows wait to be published: new, leased to a relay, or
	// waiting out a retry delay.
	Pending State = "pending"
	// Delivered rows were confirmed by the broker (kept only with
	// KeepDelivered).
	Delivered State = "delivered"
	// Dead rows failed every attempt, or failed in a way retrying cannot
	// fix. Redrive makes them pending again.
	Dead State = "dead"
)

// Row is one outbox row: the event and the relay's bookkeeping about it.
type Row struct {
	ID          int64
	Event       warren.Event
	State       State
	InsertedAt  time.Time // when the producer's transaction wrote it
	AvailableAt time.Time // when it may next be claimed
	Attempts    int       // claims spent toward MaxAttempts
	Claims      int64     // claims ever made (the fencing token)
	ClaimedBy   string    // the relay that last claimed it, while it holds the row
	LastError   string    // why the last attempt failed
	FinishedAt  time.Time // when it became delivered or dead; zero while pending

	// TraceParent and TraceState are the W3C trace context of the span
	// that wrote the row, empty when the producer was not tracing. The
	// relay sends them on as message headers.
	TraceParent, TraceState string

	// DecodeErr says which columns hold a value that the row's fields
	// cannot represent — a timestamp of 'infinity' or '-infinity', a
	// payload or extra column that is not a JSON object — and is nil
	// otherwise. Only a writer that bypasses Publish and the table's
	// checks can store one. The fields it names are left zero; the rest of
	// the row is read. The relay makes such a row dead at its first claim.
	DecodeErr error
}

// scanRow reads one row of a query that selects outboxsql.Columns, after
// any leading columns whose destinations are given in prefix. It is lent
// to the relays as outboxsql.ScanRow. A
// value the row cannot represent is reported in the row's DecodeErr, not as
// an error: pgx ends the whole result at the first column it fails to scan,
// so one such row would fail a claim, listing or purge of many. The
// timestamps are therefore scanned into pgtype.Timestamptz, which holds
// the infinities that time.Time cannot.
func scanRow(rows pgx.Rows, prefix ...any) (Row, error) {
	// The destinations live in one value, so a row costs one allocation
	// for them and the strings it holds; pgtype.Text reads a NULL as ""
	// without the extra allocation a **string costs. The relay scans
	// every row it publishes.
	var d struct {
		r                                                     Row
		projectID, initiatorID, version, claimedBy, lastError pgtype.Text
		traceParent, traceState                               pgtype.Text
		payload, extra                                        []byte
		state                                                 string
		createdAt, insertedAt, availableAt, finishedAt        pgtype.Timestamptz
		dest                                                  [32]any
	}
	r, ev := &d.r, &d.r.Event
	dest := append(append(d.dest[:0], prefix...), &r.ID, &ev.ID, &ev.Type, &ev.EntityType, &ev.EntityID, &ev.WorkspaceID,
		&d.projectID, &d.initiatorID, &ev.InitiatorType, &d.payload, &d.version, &d.extra, &d.createdAt,
		&d.insertedAt, &d.state, &d.availableAt, &r.Attempts, &r.Claims, &d.claimedBy, &d.lastError, &d.finishedAt, &d.traceParent, &d.traceState)
	if err := rows.Scan(dest...); err != nil {
		return *r, err
	}
	ev.ProjectID, ev.InitiatorID, ev.Version = d.projectID.String, d.initiatorID.String, d.version.String
	r.State, r.ClaimedBy, r.LastError = State(d.state), d.claimedBy.String, d.lastError.String
	r.TraceParent, r.TraceState = d.traceParent.String, d.traceState.String
	var problems []error
	for _, ts := range [...]struct {
		column string
		value  *pgtype.Timestamptz
		field  *time.Time
	}{
		{"created_at", &d.createdAt, &ev.CreatedAt},
		{"inserted_at", &d.insertedAt, &r.InsertedAt},
		{"available_at", &d.availableAt, &r.AvailableAt},
		{"finished_at", &d.finishedAt, &r.FinishedAt},
	} {
		switch {
		case !ts.value.Valid: // NULL: the zero time
		case ts.value.InfinityModifier != pgtype.Finite:
			problems = append(problems, fmt.Errorf("%s is %s, not a point in time", ts.column, ts.value.InfinityModifier))
		default:
			*ts.field = ts.value.Time
		}
	}
	if err := ev.Payload.UnmarshalJSON(d.payload); err != nil {
		problems = append(problems, fmt.Errorf("payload column: %w", err))
	}
	if d.extra != nil {
		if err := json.Unmarshal(d.extra, &ev.Extra); err != nil {
			problems = append(problems, fmt.Errorf("extra column is not a JSON object: %w", err))
		}
	}
	if len(problems) > 0 {
		r.DecodeErr = fmt.Errorf("row %d: %w", r.ID, errors.Join(problems...))
	}
	return *r, nil
}

// collectRows scans every row of rows. A row that does not decode is
// returned with its DecodeErr set.
func collectRows(rows pgx.Rows) ([]Row, error) {
	defer rows.Close()
	var out []Row
	for rows.Next() {
		r, err := scanRow(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// The relays and the test kit read rows with their own SQL; the scanner
// and the select list are lent to them, not exported (package
// internal/outboxsql says why).
func init() { outboxsql.Lend(scanRow, (*Table).rowColumns) }
