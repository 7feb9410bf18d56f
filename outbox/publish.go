package outbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/internal/tracecontext"
)

// Publish writes ev to the default outbox table ([DefaultTable]) in tx.
// See [Table.Publish].
func Publish(ctx context.Context, tx pgx.Tx, ev warren.Event) (inserted bool, err error) {
	return defaultTable.Publish(ctx, tx, ev)
}

// PublishBatch writes evs to the default outbox table in tx. See
// [Table.PublishBatch].
func PublishBatch(ctx context.Context, tx pgx.Tx, evs []warren.Event) (inserted int, err error) {
	return defaultTable.PublishBatch(ctx, tx, evs)
}

// Publish writes ev to the outbox inside tx, the transaction that writes
// the business change the event describes, and signals the relay with a
// NOTIFY that Postgres delivers only if tx commits. The event is published
// to the broker once tx commits; if tx rolls back, it never existed.
//
// Publish takes a pgx.Tx and nothing else on purpose: given a pool or a
// bare connection, the row would be written in a transaction of its own and
// commit without the business change, or with it rolled back — the
// dual-write bug the outbox exists to remove. The type makes that mistake
// a compile error.
//
// event_id is the deduplication key: inserting an event whose event_id is
// already in the table does nothing and reports inserted = false. An event
// that cannot be stored (no event_id or event_type, a NUL byte, invalid
// UTF-8, an event_id, event_type, entity_id or initiator_type over 255
// bytes) is refused with an error wrapping [warren.ErrInvalidEvent]
// before anything reaches tx. An error from Postgres itself aborts tx, as
// any failed statement does.
//
// A zero CreatedAt is stored as the transaction's time. When ctx carries
// an OpenTelemetry span, its W3C trace context is stored with the event,
// and the relay and the consumer continue that trace.
func (o *Table) Publish(ctx context.Context, tx pgx.Tx, ev warren.Event) (inserted bool, err error) {
	n, err := o.PublishBatch(ctx, tx, []warren.Event{ev})
	return n == 1, err
}

// PublishBatch writes evs in one statement, in order, inside tx, like
// [Table.Publish], and returns how many were new (events whose event_id
// was already stored, or repeats an earlier event of evs, are skipped). If
// any event is invalid, nothing is written.
func (o *Table) PublishBatch(ctx context.Context, tx pgx.Tx, evs []warren.Event) (inserted int, err error) {
	if tx == nil {
		return 0, errors.New("outbox: Publish needs a transaction, got a nil pgx.Tx")
	}
	if o.schema == SchemaPlane {
		return 0, fmt.Errorf("outbox %s: Publish: %w", o.table, ErrPlaneRowsAreKept)
	}
	if len(evs) == 0 {
		return 0, nil
	}
	var cols insertColumns
	for i, ev := range evs {
		err := cols.add(ev)
		if err == nil && o.check != nil {
			err = o.check(ev)
		}
		if err != nil {
			return 0, fmt.Errorf("outbox: event %d of %d (event_id %.80q): %w", i+1, len(evs), ev.ID, err)
		}
	}
	traceParent, traceState := tracecontext.FromContext(ctx)
	args := append(cols.args(o.channel), nullable(traceParent), nullable(traceState))
	if err := tx.QueryRow(ctx, o.sql.insert, args...).Scan(&inserted); err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && (pgErr.Code == "42P01" || pgErr.Code == "42703") { // undefined_table, undefined_column
			// What a new user meets first: say the fix, not only SQLSTATE.
			return 0, fmt.Errorf("outbox: write %d events to outbox %s: %w: the table is missing or older than this build; run `warren outbox migrate` or Table.Migrate (and CheckSchema at start-up): %w", len(evs), o.table, ErrSchema, err)
		}
		return 0, fmt.Errorf("outbox: write %d events to outbox %s: %w", len(evs), o.table, err)
	}
	return inserted, nil
}

// insertColumns holds a batch column by column, as the insert's unnest
// takes it. Optional fields are nil pointers, stored as NULL.
type insertColumns struct {
	eventID, eventType, entityType, entityID, workspaceID []string
	projectID, initiatorID                                []*string
	initiatorType, payload                                []string
	version, extra                                        []*string
	createdAt                                             []*time.Time
}

func (c *insertColumns) args(channel string) []any {
	return []any{c.eventID, c.eventType, c.entityType, c.entityID, c.workspaceID, c.projectID,
		c.initiatorID, c.initiatorType, c.payload, c.version, c.extra, c.createdAt, channel}
}

// envelopeFields are the top-level names Event encodes itself; a copy of
// one in Extra would be dropped on encoding anyway, so it is not stored.
var envelopeFields = map[string]bool{
	"event_id": true, "event_type": true, "entity_type": true, "entity_id": true,
	"workspace_id": true, "project_id": true, "initiator_id": true, "initiator_type": true,
	"payload": true, "created_at": true, "version": true,
}

// maxShortString is AMQP's limit for message_id, type and the routing key,
// which carry event_id and event_type.
const maxShortString = 255

func (c *insertColumns) add(ev warren.Event) error {
	if err := ev.Validate(); err != nil {
		return err
	}
	texts := []struct{ name, value string }{
		{"event_id", ev.ID}, {"event_type", ev.Type}, {"entity_type", ev.EntityType},
		{"entity_id", ev.EntityID}, {"workspace_id", ev.WorkspaceID}, {"project_id", ev.ProjectID},
		{"initiator_id", ev.InitiatorID}, {"initiator_type", ev.InitiatorType}, {"version", ev.Version},
	}
	for _, f := range texts {
		if err := storableText(f.name, f.value); err != nil {
			return err
		}
	}
	// event_id and event_type are AMQP short strings; entity_id and
	// initiator_type are carried as headers, where a large value would
	// push the message's headers past frame_max and the relay would make
	// the event dead: refused here, where the producer sees why. 255 bytes
	// holds any id (Plane's are UUIDs) and initiator type (USER, SYSTEM…).
	for _, f := range []struct{ name, value string }{
		{"event_id", ev.ID}, {"event_type", ev.Type}, {"entity_id", ev.EntityID}, {"initiator_type", ev.InitiatorType},
	} {
		if len(f.value) > maxShortString {
			return invalidf("%s is %d bytes, more than the %d an AMQP property or warren header holds", f.name, len(f.value), maxShortString)
		}
	}
	payload, err := ev.Payload.MarshalJSON()
	if err != nil {
		return invalidf("payload: %v", err)
	}
	if err := storableJSON("payload", payload); err != nil {
		return err
	}
	extra, err := encodeExtra(ev.Extra)
	if err != nil {
		return err
	}
	c.eventID = append(c.eventID, ev.ID)
	c.eventType = append(c.eventType, ev.Type)
	c.entityType = append(c.entityType, ev.EntityType)
	c.entityID = append(c.entityID, ev.EntityID)
	c.workspaceID = append(c.workspaceID, ev.WorkspaceID)
	c.projectID = append(c.projectID, nullable(ev.ProjectID))
	c.initiatorID = append(c.initiatorID, nullable(ev.InitiatorID))
	c.initiatorType = append(c.initiatorType, ev.InitiatorType)
	c.payload = append(c.payload, string(payload))
	c.version = append(c.version, nullable(ev.Version))
	c.extra = append(c.extra, extra)
	var created *time.Time
	if !ev.CreatedAt.IsZero() {
		t := ev.CreatedAt
		created = &t
	}
	c.createdAt = append(c.createdAt, created)
	return nil
}

// encodeExtra returns the event's unknown top-level fields as one JSON
// object, or nil when there are none.
func encodeExtra(extra map[string]json.RawMessage) (*string, error) {
	kept := map[string]json.RawMessage{}
	for name, raw := range extra {
		if envelopeFields[name] {
			continue
		}
		if !json.Valid(raw) {
			return nil, invalidf("extra field %q holds invalid JSON", name)
		}
		kept[name] = raw
	}
	if len(kept) == 0 {
		return nil, nil
	}
	b, err := json.Marshal(kept)
	if err != nil {
		return nil, invalidf("extra fields: %v", err)
	}
	if err := storableJSON("extra fields", b); err != nil {
		return nil, err
	}
	s := string(b)
	return &s, nil
}

// storableText refuses what a Postgres text column refuses, so the error
// comes before the statement instead of aborting the caller's transaction.
func storableText(field, s string) error {
	switch {
	case !utf8.ValidString(s):
		return invalidf("%s is not valid UTF-8", field)
	case strings.IndexByte(s, 0) >= 0:
		return invalidf("%s contains a NUL byte", field)
	}
	return nil
}

// storableJSON refuses the escape jsonb cannot store: \u0000 (a backslash
// preceded by an even number of backslashes, so not an escaped "\\u0000").
func storableJSON(field string, b []byte) error {
	for i := 0; i+6 <= len(b); i++ {
		if b[i] != '\\' {
			continue
		}
		if string(b[i:i+6]) == `\u0000` {
			return invalidf("%s contains the escape \\u0000, which Postgres jsonb cannot store", field)
		}
		i++ // skip the escaped character, so `\\u0000` is not mistaken for one
	}
	return nil
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", warren.ErrInvalidEvent, fmt.Sprintf(format, args...))
}
