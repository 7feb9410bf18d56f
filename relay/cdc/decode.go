package cdc

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/warrenmq/warren/outbox"
)

// errUnchangedToast says an update's new tuple left a large value out
// (pgoutput sends "unchanged TOAST" instead of the value): the row must be
// read from the table.
var errUnchangedToast = errors.New("a column's value was left out as unchanged")

// decodeTuple reads an outbox row from a tuple of rel, as pgoutput sends
// it in text format. The replication connection runs with DateStyle ISO,
// so timestamps are in the format pgtype parses. Columns the row has no
// field for are ignored, so a later migration that adds one does not
// break the relay. A value the row cannot hold is reported in DecodeErr,
// as outbox's row scanner does, and makes the event dead rather than stop the
// stream.
func decodeTuple(types *pgtype.Map, rel *pglogrepl.RelationMessage, tuple *pglogrepl.TupleData) (outbox.Row, error) {
	var row outbox.Row
	ev := &row.Event
	if tuple == nil || len(tuple.Columns) != len(rel.Columns) {
		return row, fmt.Errorf("relation %s.%s: a tuple of %d columns for %d", rel.Namespace, rel.RelationName, columnCount(tuple), len(rel.Columns))
	}
	var problems []error
	var sawID bool
	var leftOut []string
	for i, col := range tuple.Columns {
		name := rel.Columns[i].Name
		switch col.DataType {
		case pglogrepl.TupleDataTypeToast:
			leftOut = append(leftOut, name)
			continue
		case pglogrepl.TupleDataTypeNull:
			continue
		case pglogrepl.TupleDataTypeBinary:
			return row, fmt.Errorf("column %s arrived in binary format; the relay asks for text", name)
		}
		text := string(col.Data)
		var err error
		switch name {
		case "id":
			row.ID, err = strconv.ParseInt(text, 10, 64)
			sawID = err == nil
		case "event_id":
			ev.ID = text
		case "event_type":
			ev.Type = text
		case "entity_type":
			ev.EntityType = text
		case "entity_id":
			ev.EntityID = text
		case "workspace_id":
			ev.WorkspaceID = text
		case "project_id":
			ev.ProjectID = text
		case "initiator_id":
			ev.InitiatorID = text
		case "initiator_type":
			ev.InitiatorType = text
		case "version":
			ev.Version = text
		case "state":
			row.State = outbox.State(text)
		case "traceparent":
			row.TraceParent = text
		case "tracestate":
			row.TraceState = text
		case "claimed_by":
			row.ClaimedBy = text
		case "last_error":
			row.LastError = text
		case "attempts":
			row.Attempts, err = strconv.Atoi(text)
		case "claims":
			row.Claims, err = strconv.ParseInt(text, 10, 64)
		case "payload":
			if err = ev.Payload.UnmarshalJSON(col.Data); err != nil {
				err = fmt.Errorf("payload column: %w", err)
				problems, err = append(problems, err), nil
			}
		case "extra":
			if err = json.Unmarshal(col.Data, &ev.Extra); err != nil {
				problems, err = append(problems, fmt.Errorf("extra column is not a JSON object: %w", err)), nil
			}
		case "created_at", "inserted_at", "available_at", "finished_at":
			if p := timestamp(types, rel.Columns[i].DataType, name, col.Data, &row); p != nil {
				problems = append(problems, p)
			}
		}
		if err != nil {
			return row, fmt.Errorf("column %s: %w", name, err)
		}
	}
	if !sawID {
		return row, errors.New("the tuple has no id")
	}
	if len(leftOut) > 0 {
		return row, fmt.Errorf("row %d, columns %v: %w", row.ID, leftOut, errUnchangedToast)
	}
	if len(problems) > 0 {
		row.DecodeErr = fmt.Errorf("row %d: %w", row.ID, errors.Join(problems...))
	}
	return row, nil
}

// timestamp decodes one timestamp column into its field of row and
// returns what made it unusable, if anything.
func timestamp(types *pgtype.Map, oid uint32, name string, data []byte, row *outbox.Row) error {
	var ts pgtype.Timestamptz
	if err := types.Scan(oid, pgtype.TextFormatCode, data, &ts); err != nil {
		return fmt.Errorf("%s %q: %w", name, data, err)
	}
	if ts.InfinityModifier != pgtype.Finite {
		return fmt.Errorf("%s is %s, not a point in time", name, ts.InfinityModifier)
	}
	var field *time.Time
	switch name {
	case "created_at":
		field = &row.Event.CreatedAt
	case "inserted_at":
		field = &row.InsertedAt
	case "available_at":
		field = &row.AvailableAt
	default:
		field = &row.FinishedAt
	}
	*field = ts.Time
	return nil
}

func columnCount(t *pglogrepl.TupleData) int {
	if t == nil {
		return 0
	}
	return len(t.Columns)
}
