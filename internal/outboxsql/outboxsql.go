package outboxsql

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
)

// Columns are the columns ScanRow reads, in its order, for a query that
// selects whole rows of a warren-schema table (SELECT Columns FROM …);
// RowColumns gives the list for any table.
const Columns = `id, event_id, event_type, entity_type, entity_id, workspace_id, project_id,
	initiator_id, initiator_type, payload, version, extra, created_at, inserted_at, state,
	available_at, attempts, claims, claimed_by, last_error, finished_at, traceparent, tracestate`

// lent holds what package outbox lends (Lend): a
// func(pgx.Rows, ...any) (outbox.Row, error) and a
// func(*outbox.Table, bool) string.
var lent struct{ scanRow, rowColumns any }

// Lend is called by package outbox's init with its row scanner and its
// Table's select list; nothing else calls it.
func Lend[Row, Table any](scanRow func(rows pgx.Rows, prefix ...any) (Row, error), rowColumns func(t Table, migrated bool) string) {
	lent.scanRow, lent.rowColumns = scanRow, rowColumns
}

// ScanRow reads one row of a query that selects RowColumns, after any
// leading columns whose destinations are given in prefix (outbox's
// scanner: a value the row cannot represent is reported in the row's
// DecodeErr, not as an error). Row is outbox.Row.
func ScanRow[Row any](rows pgx.Rows, prefix ...any) (Row, error) {
	return lent.scanRow.(func(pgx.Rows, ...any) (Row, error))(rows, prefix...)
}

// RowColumns is the select list that reads Columns from table (an
// *outbox.Table): Columns itself for a warren-schema table; for Plane's,
// expressions over Plane's columns, and over warren's optional ones when
// migrated says the table has them.
func RowColumns[Table any](table Table, migrated bool) string {
	return lent.rowColumns.(func(Table, bool) string)(table, migrated)
}

// PlaneClaimToken is the fencing token of a claim on Plane's table, as
// SQL over the claimed_at expression col: its time in whole microseconds
// since the epoch (0 while unclaimed). Two claims of one row are at least
// a lease apart, so their tokens differ; the relay's settle statements
// match a row only while its claimed_at still yields the token the claim
// returned (as the row's Claims). It is computed the same way on both
// sides, from the stored value, so the column's type (timestamp or
// timestamptz) and the session's time zone do not matter.
func PlaneClaimToken(col string) string {
	return fmt.Sprintf("coalesce(floor(extract(epoch FROM %s) * 1000000)::bigint, 0)", col)
}

// MaxErrorText is the most bytes of error text a relay writes to a row's
// last_error.
const MaxErrorText = 2000

// ErrorText is s as a relay stores it in last_error: what a text column
// refuses (invalid UTF-8, NUL) replaced by U+FFFD, and cut to at most
// MaxErrorText bytes on a character boundary, "…" marking the cut. A cut
// inside a character, or a byte Postgres refuses, would fail the
// statement that records the row's failure, and with it every attempt to
// record it.
func ErrorText(s string) string {
	s = strings.ToValidUTF8(strings.ReplaceAll(s, "\x00", "\uFFFD"), "\uFFFD")
	if len(s) <= MaxErrorText {
		return s
	}
	const cut = "…"
	n := MaxErrorText - len(cut)
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + cut
}
