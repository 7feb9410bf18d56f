package outbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/warrenmq/warren"
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

// ScanRow reads one row of a query that selects [Columns], after any
// leading columns whose destinations are given in prefix. A
// value the row cannot represent is reported in the row's DecodeErr, not as
// an error: pgx ends the whole result at the first column it fails to scan,
// so one such row would fail a claim, listing or purge of many. The
// timestamps are therefore scanned into pgtype.Timestamptz, which holds
// the infinities that time.Time cannot.
func ScanRow(rows pgx.Rows, prefix ...any) (Row, error) {
	var (
		r                                                     Row
		projectID, initiatorID, version, claimedBy, lastError *string
		traceParent, traceState                               *string
		payload, extra                                        []byte
		state                                                 string
		createdAt, insertedAt, availableAt, finishedAt        pgtype.Timestamptz
	)
	ev := &r.Event
	dest := append(prefix, &r.ID, &ev.ID, &ev.Type, &ev.EntityType, &ev.EntityID, &ev.WorkspaceID,
		&projectID, &initiatorID, &ev.InitiatorType, &payload, &version, &extra, &createdAt,
		&insertedAt, &state, &availableAt, &r.Attempts, &r.Claims, &claimedBy, &lastError, &finishedAt, &traceParent, &traceState)
	if err := rows.Scan(dest...); err != nil {
		return r, err
	}
	ev.ProjectID, ev.InitiatorID, ev.Version = deref(projectID), deref(initiatorID), deref(version)
	r.State, r.ClaimedBy, r.LastError = State(state), deref(claimedBy), deref(lastError)
	r.TraceParent, r.TraceState = deref(traceParent), deref(traceState)
	var problems []error
	for _, ts := range []struct {
		column string
		value  pgtype.Timestamptz
		field  *time.Time
	}{
		{"created_at", createdAt, &ev.CreatedAt},
		{"inserted_at", insertedAt, &r.InsertedAt},
		{"available_at", availableAt, &r.AvailableAt},
		{"finished_at", finishedAt, &r.FinishedAt},
	} {
		switch {
		case !ts.value.Valid: // NULL: the zero time
		case ts.value.InfinityModifier != pgtype.Finite:
			problems = append(problems, fmt.Errorf("%s is %s, not a point in time", ts.column, ts.value.InfinityModifier))
		default:
			*ts.field = ts.value.Time
		}
	}
	if err := ev.Payload.UnmarshalJSON(payload); err != nil {
		problems = append(problems, fmt.Errorf("payload column: %w", err))
	}
	if extra != nil {
		if err := json.Unmarshal(extra, &ev.Extra); err != nil {
			problems = append(problems, fmt.Errorf("extra column is not a JSON object: %w", err))
		}
	}
	if len(problems) > 0 {
		r.DecodeErr = fmt.Errorf("row %d: %w", r.ID, errors.Join(problems...))
	}
	return r, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// collectRows scans every row of rows. A row that does not decode is
// returned with its DecodeErr set.
func collectRows(rows pgx.Rows) ([]Row, error) {
	defer rows.Close()
	var out []Row
	for rows.Next() {
		r, err := ScanRow(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}
