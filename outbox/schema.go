package outbox

import (
	"fmt"
	"strings"
	"time"
)

// Schema is the layout of an outbox table.
type Schema string

const (
	// SchemaWarren is warren's own table, created and upgraded by
	// [Table.Migrate] and written by [Table.Publish].
	SchemaWarren Schema = "warren"

	// SchemaPlane is Plane's outbox table as Plane's migrations create it
	// and Plane's triggers write it (id, event_id, …, created_at,
	// claimed_at, processed_at), drained in place: claimed_at is the
	// claim and its lease, processed_at marks a published row, and no row
	// is ever deleted (Plane's cleaner deletes processed rows). What needs
	// a column of its own — attempts, the last error, a dead state — comes
	// from an optional, additive migration ([Table.Migrate]) that Plane's
	// model, poller and cleaner do not notice.
	SchemaPlane Schema = "plane"
)

// DefaultPlaneTable is Plane's outbox table's name, the table of a
// SchemaPlane outbox when none is given.
const DefaultPlaneTable = "outbox"

// ParseSchema accepts "warren", "plane" and "" (warren).
func ParseSchema(s string) (Schema, error) {
	switch Schema(s) {
	case "", SchemaWarren:
		return SchemaWarren, nil
	case SchemaPlane:
		return SchemaPlane, nil
	}
	return "", fmt.Errorf("unknown outbox schema %q: want %q or %q", s, SchemaWarren, SchemaPlane)
}

// PlaneClaimToken is the fencing token of a claim on a SchemaPlane table,
// as SQL over the claimed_at expression col: its time in whole
// microseconds since the epoch (0 while unclaimed). Two claims of one row
// are at least a lease apart, so their tokens differ; the relay's settle
// statements match a row only while its claimed_at still yields the token
// the claim returned (as [Row].Claims). It is computed the same way on
// both sides, from the stored value, so the column's type
// (timestamp or timestamptz) and the session's time zone do not matter.
func PlaneClaimToken(col string) string {
	return fmt.Sprintf("coalesce(floor(extract(epoch FROM %s) * 1000000)::bigint, 0)", col)
}

// intervalSQL renders d as an SQL interval literal. Only durations the
// package itself holds are rendered, never caller text.
func intervalSQL(d time.Duration) string {
	return fmt.Sprintf("interval '%d microseconds'", d.Microseconds())
}

// replacePlaceholders replaces each {name} in q by its value.
func replacePlaceholders(q string, values map[string]string) string {
	pairs := make([]string, 0, 2*len(values))
	for k, v := range values {
		pairs = append(pairs, "{"+k+"}", v)
	}
	return strings.NewReplacer(pairs...).Replace(q)
}
