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
