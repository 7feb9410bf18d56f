package outbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/warrenmq/warren"
)

// DB is what the outbox operations need from Postgres. *pgxpool.Pool,
// *pgx.Conn and pgx.Tx all satisfy it. [Table.Publish] deliberately does
// not take a DB: it takes a pgx.Tx.
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Table is one outbox table: the statements that write, inspect and trim
// it. It holds no connection, so it is cheap and safe to share.
type Table struct {
	table       string
	channel     string
	schema      Schema
	lease       time.Duration // SchemaPlane: how long a claim holds a row
	lockTimeout time.Duration // SchemaPlane: how long Migrate waits for the table's lock
	sql         statements    // SchemaWarren
	plane       [2]planeStatements
	check       func(warren.Event) error // Options.Check
}

// DefaultTable is the outbox table's name when none is given.
const DefaultTable = "warren_outbox"

// ErrInvalidConfig is wrapped by the errors [New] and [Table.Purge]
// return for a bad table name or bad options.
var ErrInvalidConfig = errors.New("invalid outbox config")

// maxTableLen leaves room under Postgres's 63-byte identifier limit for the
// suffixes of the indexes, constraints and migrations table named after
// the outbox table.
const maxTableLen = 48

var tableNameRE = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)

// ValidateTable accepts a plain lower-case identifier of at most 48
// bytes. Anything else — upper case, quotes, dots, spaces — is refused
// rather than quoted into a name nobody can type back in psql.
func ValidateTable(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("table name is empty")
	case len(name) > maxTableLen:
		return fmt.Errorf("table name %q is %d bytes, more than %d", name, len(name), maxTableLen)
	case !tableNameRE.MatchString(name):
		return fmt.Errorf("table name %q must match %s", name, tableNameRE)
	}
	return nil
}

// New returns the outbox stored in table ("" means [DefaultTable]) in
// warren's own schema. The name is validated and every statement quotes
// it.
func New(table string) (*Table, error) {
	return Open(table, Options{})
}

// Options say which kind of outbox table [Open] opens.
type Options struct {
	// Schema is the table's layout: SchemaWarren (the default) or
	// SchemaPlane.
	Schema Schema

	// Lease is how long a claim holds a row on a SchemaPlane table: a
	// claimed_at older than this is a lapsed claim, taken over by the
	// relay. It must be the relays' Lease (relay.Config.Lease). Default
	// DefaultLease. Unused with SchemaWarren, whose rows carry their
	// lease's end.
	Lease time.Duration

	// LockTimeout is how long [Table.Migrate] waits, on a SchemaPlane
	// table, for the lock its ALTER TABLE needs before it gives up with an
	// error wrapping [ErrLockTimeout], having changed nothing: while it
	// waits (for a long transaction that read or wrote the table to end),
	// every other read and write of the table queues behind it. Default
	// DefaultLockTimeout. Unused with SchemaWarren.
	LockTimeout time.Duration

	// Check, if set, is called with every event [Table.Publish] and
	// [Table.PublishBatch] are given, before anything is written: an
	// error refuses the whole batch, in the producer's transaction, so an
	// event that breaks its contract never enters the stream. Pass a
	// contract.Set's Check (or CheckKnown).
	Check func(warren.Event) error

	// Notify is when [Table.Publish] and [Table.PublishBatch] send the
	// NOTIFY that wakes relays: NotifyWhenIdle (the default),
	// NotifyEveryCommit or NotifyNever. Unused with SchemaPlane, whose rows
	// Publish does not write.
	Notify Notify
}

// Notify is [Options.Notify].
type Notify string

const (
	// NotifyWhenIdle notifies only when no other row of the table is due
	// and unclaimed. The default.
	//
	// Why: Postgres serialises every committing transaction that sent a
	// NOTIFY on one database-wide lock, held through the commit's WAL
	// flush, so notifying transactions cannot share a flush (group commit)
	// and a steady stream of them commits at most once per disk flush.
	// devtools/bench/RESULTS.md measures producers at 1,000 and 3,000
	// events/s with and without it. While events flow, a due row is
	// almost always waiting, the relay is busy, and nobody notifies.
	//
	// Why no event is left behind: a producer that skips its NOTIFY saw,
	// in its statement's snapshot, a due row R committed before it (only a
	// READ COMMITTED transaction skips: under REPEATABLE READ or
	// SERIALIZABLE the snapshot is the transaction's first, which can show
	// a row published long ago, so those notify every time). R was
	// notified by its own producer, or skipped on the same grounds for an
	// older row, down to a row that notified or that the relay's poll
	// finds; either way a claim of R comes, and a claim that finds rows
	// sets the relay's poll back to PollMin, so the relay looks again
	// within PollMin, doubling while it finds nothing, up to PollMax. If
	// the producer's commit lands after those claims looked, its row waits
	// for the next poll, as a notification lost while the listener
	// reconnects would: never longer than the relay's poll interval, and
	// about as long as the producer took between Publish and its commit,
	// given the relay's default PollMin of a few milliseconds: a busy
	// relay hears of new rows from that poll, not from notifications. A
	// row due for a retry, a lapsed lease, or under
	// relay.Config.OrderByEntity a row held back behind its entity's
	// failing one, also counts as due: new events then rely on the poll
	// until it is gone.
	NotifyWhenIdle Notify = "when-idle"

	// NotifyEveryCommit notifies in every transaction that publishes: a
	// relay whose PollMin is long still hears of each event at once, and
	// the producers' commits pay the serialised flush above.
	NotifyEveryCommit Notify = "every-commit"

	// NotifyNever sends no NOTIFY at all: for a table that only CDC
	// relays (package relay/cdc) drain, which read the write-ahead log and
	// listen to nothing. A polling relay on such a table still finds
	// every row, by its poll, up to its PollMax later.
	NotifyNever Notify = "never"
)

// DefaultLease is Options.Lease's default, relay.DefaultLease.
const DefaultLease = 30 * time.Second

// Open returns the outbox stored in table with the given options. An
// empty table means [DefaultTable] for SchemaWarren and
// [DefaultPlaneTable] for SchemaPlane. The name is validated and every
// statement quotes it.
func Open(table string, opts Options) (*Table, error) {
	schema, err := ParseSchema(string(opts.Schema))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	if table == "" {
		table = DefaultTable
		if schema == SchemaPlane {
			table = DefaultPlaneTable
		}
	}
	if err := ValidateTable(table); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	switch opts.Notify {
	case "", NotifyWhenIdle, NotifyEveryCommit, NotifyNever:
	default:
		return nil, fmt.Errorf("%w: Notify must be %q, %q or %q, not %q", ErrInvalidConfig, NotifyWhenIdle, NotifyEveryCommit, NotifyNever, opts.Notify)
	}
	lease := opts.Lease
	if lease == 0 {
		lease = DefaultLease
	}
	if lease < time.Millisecond {
		return nil, fmt.Errorf("%w: Lease must be at least 1ms, got %v", ErrInvalidConfig, lease)
	}
	if opts.LockTimeout < 0 {
		return nil, fmt.Errorf("%w: LockTimeout must not be negative, got %v", ErrInvalidConfig, opts.LockTimeout)
	}
	o := &Table{table: table, channel: "warren." + table, schema: schema, lease: lease, lockTimeout: cmp.Or(opts.LockTimeout, DefaultLockTimeout), check: opts.Check}
	switch schema {
	case SchemaWarren:
		o.sql = renderStatements(table, notifyMode(opts))
	case SchemaPlane:
		o.plane = [2]planeStatements{renderPlaneStatements(table, lease, false), renderPlaneStatements(table, lease, true)}
	}
	return o, nil
}

var defaultTable = must(New(DefaultTable))

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// Name returns the table's name.
func (o *Table) Name() string { return o.table }

// Schema returns the table's layout.
func (o *Table) Schema() Schema { return o.schema }

// Lease returns Options.Lease after its default (used by SchemaPlane only).
func (o *Table) Lease() time.Duration { return o.lease }

// Channel returns the LISTEN/NOTIFY channel that Publish signals and the
// relay listens on: "warren." followed by the table name.
func (o *Table) Channel() string { return o.channel }

// CaptureErrorsTable returns the name of the table where triggers made by
// package outbox/capture with its Record policy note the events they could
// not write to this outbox. It exists only once such a capture is
// installed.
func (o *Table) CaptureErrorsTable() string { return o.table + captureErrorsSuffix }

// captureErrorsSuffix fits the longest valid table name (48 bytes) in
// Postgres's 63.
const captureErrorsSuffix = "_capture_errors"

var placeholderRE = regexp.MustCompile(`\{table(_[a-z_]+)?\}`)

// render replaces {table} with the quoted table name and {table_suffix}
// with the quoted name of an object named after it (an index, the
// migrations table).
func render(table, query string) string {
	return placeholderRE.ReplaceAllStringFunc(query, func(m string) string {
		return pgx.Identifier{table + m[len("{table"):len(m)-1]}.Sanitize()
	})
}
