package relay

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

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
}

// scanRow reads rowColumns, after any leading columns given in prefix. A
// payload or extra column that does not decode (possible only if the
// table's CHECK constraints were dropped) is reported as decodeErr, so the
// relay can make that one row dead instead of failing the batch.
func scanRow(rows pgx.Rows, prefix ...any) (r Row, decodeErr error, err error) {
	var (
		projectID, initiatorID, version, claimedBy, lastError *string
		payload, extra                                        []byte
		state                                                 string
		finishedAt                                            *time.Time
	)
	ev := &r.Event
	dest := append(prefix, &r.ID, &ev.ID, &ev.Type, &ev.EntityType, &ev.EntityID, &ev.WorkspaceID,
		&projectID, &initiatorID, &ev.InitiatorType, &payload, &version, &extra, &ev.CreatedAt,
		&r.InsertedAt, &state, &r.AvailableAt, &r.Attempts, &r.Claims, &claimedBy, &lastError, &finishedAt)
	if err := rows.Scan(dest...); err != nil {
		return r, nil, err
	}
	ev.ProjectID, ev.InitiatorID, ev.Version = deref(projectID), deref(initiatorID), deref(version)
	r.State, r.ClaimedBy, r.LastError = State(state), deref(claimedBy), deref(lastError)
	if finishedAt != nil {
		r.FinishedAt = *finishedAt
	}
	if err := ev.Payload.UnmarshalJSON(payload); err != nil {
		return r, fmt.Errorf("row %d: payload column: %w", r.ID, err), nil
	}
	if extra != nil {
		if err := json.Unmarshal(extra, &ev.Extra); err != nil {
			return r, fmt.Errorf("row %d: extra column is not a JSON object: %w", r.ID, err), nil
		}
	}
	return r, nil, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// collectRows scans every row of rows, failing on the first that does not
// decode.
func collectRows(rows pgx.Rows) ([]Row, error) {
	defer rows.Close()
	var out []Row
	for rows.Next() {
		r, decodeErr, err := scanRow(rows)
		if err != nil {
			return nil, err
		}
		if decodeErr != nil {
			return nil, decodeErr
		}
		out = append(out, r)
	}
	return out, rows.Err()
}
