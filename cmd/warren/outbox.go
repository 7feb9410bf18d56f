package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/warrenmq/warren/internal/redact"
	"github.com/warrenmq/warren/outbox"
	"github.com/warrenmq/warren/outbox/capture"
	"github.com/warrenmq/warren/relay/cdc"
)

// defaultOutboxDatabaseURL is the database when neither --database-url nor
// DATABASE_URL says otherwise: the local development database.
const defaultOutboxDatabaseURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

var outboxCommand = command{name: "outbox", summary: "migrate, inspect, redrive and purge the outbox table; capture a table's changes", run: runOutbox}

// outboxSub is one `warren outbox` subcommand.
type outboxSub = subcommand[outboxOptions, *outboxCall]

// outboxVerbs are `warren outbox`'s subcommands: each names the database
// and the table.
var outboxVerbs = &subcommands[outboxOptions, *outboxCall]{
	command: "outbox", common: func(fs *flagSet, o *outboxOptions) {
		o.db.register(fs)
		fs.Var(&o.lease, "lease", "DURATION", fmt.Sprintf("--schema plane: the relays' lease; a claim older than this has lapsed (default %v)", outbox.DefaultLease))
	}, usage: printOutboxUsage, verbs: outboxSubs,
}

var outboxSubs = []outboxSub{
	{
		name: "migrate", summary: "create the outbox table or bring it up to date",
		about: "Create the outbox table, its indexes and its migrations record, or apply the migrations it lacks. Safe to run at every deploy and from several places at once.",
		examples: []string{
			"warren outbox migrate",
			"warren outbox migrate --table orders_outbox",
			"warren outbox migrate --schema plane     (add warren's optional columns to Plane's table: attempts, last error, dead rows)",
		},
		flags: func(fs *flagSet, o *outboxOptions) {
			fs.Var(&o.lockTimeout, "lock-timeout", "DURATION", fmt.Sprintf("--schema plane: how long the ALTER TABLE may wait for the table's lock, while every read and write of the table queues behind it, before it gives up, changing nothing (default %v)", outbox.DefaultLockTimeout))
		},
		run: runOutboxMigrate,
	},
	{
		name: "stats", summary: "count rows by state: pending, in flight, retrying, dead, delivered",
		about: "Count the outbox rows by state and show how long the oldest pending row has waited. A growing pending count or age means the relay is down or falling behind; dead rows need a look ('warren outbox dead').",
		examples: []string{
			"warren outbox stats",
			"warren outbox stats --json | jq .dead",
		},
		flags: func(fs *flagSet, o *outboxOptions) { o.jsonFlag(fs) },
		run:   runOutboxStats,
	},
	{
		name: "dead", summary: "list dead rows and why they died",
		about: "List the rows the relay gave up on, oldest first, with their attempts and last error. --json prints each whole row, event included.",
		examples: []string{
			"warren outbox dead",
			"warren outbox dead --type workitem. --limit 0 --json",
		},
		flags: func(fs *flagSet, o *outboxOptions) { o.filterFlags(fs); o.limitFlag(fs, 20); o.jsonFlag(fs) },
		run:   runOutboxDead,
	},
	{
		name: "redrive", summary: "make dead rows pending again",
		about: "Make the dead rows that match the filters pending again with their attempts reset, so the relay publishes them at once. Without a filter, --all is required.",
		examples: []string{
			"warren outbox redrive --type workitem.",
			"warren outbox redrive --id 0b7c5e2a-9f7d-4c1e-8a53-2f0f4f1c9d11",
			"warren outbox redrive --all",
		},
		flags: func(fs *flagSet, o *outboxOptions) {
			o.filterFlags(fs)
			o.limitFlag(fs, 0)
			fs.Bool(&o.all, "all", "redrive every dead row (needed when no filter is given)")
		},
		run: runOutboxRedrive,
	},
	{
		name: "purge", summary: "delete delivered and dead rows older than a cutoff",
		about: "Delete finished rows (delivered rows kept by --keep-delivered, and dead rows) that finished more than --older-than ago, in batches, one transaction each. With --archive FILE each batch is first appended to FILE as JSON Lines and synced to disk; if that fails, the batch is not deleted and purge stops. Pending rows are never purged. Needs --yes.",
		examples: []string{
			"warren outbox purge --older-than 7d --yes",
			"warren outbox purge --older-than 2d --state dead --archive dead-rows.jsonl --yes",
		},
		flags: func(fs *flagSet, o *outboxOptions) {
			fs.Var(&o.olderThan, "older-than", "AGE", "purge rows that finished at least AGE ago: 36h, 7d; required")
			fs.String(&o.state, "state", "STATE", "which rows: delivered, dead or all", "all")
			fs.Int(&o.batch, "batch", "N", "rows per transaction", outbox.DefaultPurgeBatchSize)
			fs.String(&o.archive, "archive", "FILE", "append each batch to FILE (JSON Lines) before deleting it", "")
			fs.Bool(&o.yes, "yes", "confirm the deletion")
		},
		run: runOutboxPurge,
	},
	{
		name: "capture", summary: "install triggers that write a table's changes to the outbox",
		about: "Generate, from the catalog, one statement-level trigger function for --source and its insert, update and delete triggers, which write <prefix>.created, .updated (previous_attributes: the old values of the changed tracked columns only; none for an update that changed nothing tracked) and .deleted (a hard delete, or --soft-delete-column going from NULL to a value) events to the outbox, in the changing statement's transaction. The column lists are written into the trigger: run this again after a migration changes the table. The SQL is applied in one transaction and recorded as the table's next version in " + capture.MigrationsTable + "; an unchanged result is not applied again, unless its triggers or function were dropped, disabled or edited since (then it is reinstalled, and the command says why). With --on-failure fail (the default) an event the outbox refuses fails the statement; with record the statement succeeds and the failure is written to the outbox's capture errors table, which 'warren outbox stats' and the relay's metrics count, except for errors a retry cures (deadlock, serialization failure, lock timeout), which still fail the statement. It writes to a warren-schema outbox only: with WARREN_SCHEMA=plane pass --schema warren. The initiator comes from the session settings --initiator-setting (default " + capture.DefaultInitiatorTypeSetting + ", unset: USER) and " + capture.DefaultInitiatorIDSetting + ".",
		examples: []string{
			"warren outbox capture --source issues --entity-type issue --event-prefix workitem --exclude description_html --workspace-column workspace_id --project-column project_id --print",
			"warren outbox capture --source labels --entity-type label --on-failure record --initiator-setting plane.initiator_type",
			"warren outbox capture --source labels --uninstall",
		},
		flags: func(fs *flagSet, o *outboxOptions) {
			c := &o.capture
			fs.String(&c.Table, "source", "TABLE", "the table to capture: name or schema.name; required", "")
			fs.String(&c.EntityType, "entity-type", "TYPE", "each event's entity_type (default the table's name)", "")
			fs.String(&c.EventPrefix, "event-prefix", "PREFIX", "event types are PREFIX.created, .updated, .deleted (default the entity type)", "")
			fs.String(&c.EntityIDColumn, "entity-id-column", "COLUMN", "the entity_id column (default the primary key)", "")
			fs.Var(&o.captureColumns, "columns", "COLUMNS", "track only these columns (default every column; comma-separated or repeated)")
			fs.Var(&o.captureExclude, "exclude", "COLUMNS", "leave these columns out of the events and the comparison")
			fs.String(&c.WorkspaceColumn, "workspace-column", "COLUMN", "the column holding workspace_id", "")
			fs.String(&c.ProjectColumn, "project-column", "COLUMN", "the column holding project_id", "")
			fs.String(&o.softDelete, "soft-delete-column", "COLUMN", "the soft delete column, or none (default deleted_at when the table has it)", "")
			fs.String(&c.InitiatorTypeSetting, "initiator-setting", "NAME", "the session setting holding initiator_type (default "+capture.DefaultInitiatorTypeSetting+")", "")
			fs.String(&c.InitiatorIDSetting, "initiator-id-setting", "NAME", "the session setting holding initiator_id (default "+capture.DefaultInitiatorIDSetting+")", "")
			fs.String(&o.onFailure, "on-failure", "POLICY", "fail (the statement fails) or record (the failure is recorded)", string(capture.Fail))
			fs.String(&c.Version, "event-version", "V", "each event's version field (default none)", "")
			fs.Bool(&o.print, "print", "print the SQL and apply nothing")
			fs.Bool(&o.uninstall, "uninstall", "drop the table's capture triggers and function")
		},
		run: runOutboxCapture,
	},
}

// outboxOptions holds every flag of every subcommand; each registers its
// own.
type outboxOptions struct {
	db                 outboxDBFlags
	lease, lockTimeout ageFlag

	json, all, yes bool
	types, ids     listFlag
	entity         string
	limit, batch   int
	olderThan      ageFlag
	state, archive string

	capture                        capture.Spec
	captureColumns, captureExclude listFlag
	softDelete, onFailure          string
	print, uninstall               bool
}

// outboxDBFlags are the flags that name the database, the table and its
// schema, shared with 'warren relay run'; lease is the command's own
// --lease.
type outboxDBFlags struct {
	databaseURL, table, schema string
	lease, lockTimeout         time.Duration
}

func (f *outboxDBFlags) register(fs *flagSet) {
	fs.String(&f.databaseURL, "database-url", "URL", "the Postgres database; default $DATABASE_URL, else "+defaultOutboxDatabaseURL, "")
	fs.String(&f.table, "table", "NAME", fmt.Sprintf("the outbox table; default $WARREN_OUTBOX_TABLE, else %s (%s with --schema plane)", outbox.DefaultTable, outbox.DefaultPlaneTable), "")
	fs.String(&f.schema, "schema", "warren|plane", "the table's layout: warren's own, or Plane's outbox table drained in place; default $WARREN_SCHEMA, else warren", "")
}

// resolve fills what the flags left empty from the environment and the
// defaults.
func (f *outboxDBFlags) resolve(env *cliEnv) error {
	f.databaseURL = cmp.Or(f.databaseURL, env.getenv("DATABASE_URL"), defaultOutboxDatabaseURL)
	schema, err := outbox.ParseSchema(cmp.Or(f.schema, env.getenv("WARREN_SCHEMA")))
	if err != nil {
		return usagef("--schema: %v", err)
	}
	f.schema = string(schema)
	defaultTable := outbox.DefaultTable
	if schema == outbox.SchemaPlane {
		defaultTable = outbox.DefaultPlaneTable
	}
	f.table = cmp.Or(f.table, env.getenv("WARREN_OUTBOX_TABLE"), defaultTable)
	return nil
}

// open validates the table name and connects, with the password kept out
// of every error.
func (f *outboxDBFlags) open(ctx context.Context) (*outbox.Table, *pgxpool.Pool, error) {
	ob, err := outbox.Open(f.table, outbox.Options{Schema: outbox.Schema(f.schema), Lease: f.lease, LockTimeout: f.lockTimeout})
	if err != nil {
		return nil, nil, usagef("--table: %v", err)
	}
	cfg, err := pgxpool.ParseConfig(f.databaseURL)
	if err != nil {
		return nil, nil, usagef("--database-url: %v", redact.Error(err, f.databaseURL))
	}
	if cfg.ConnConfig.RuntimeParams["application_name"] == "" {
		cfg.ConnConfig.RuntimeParams["application_name"] = "warren outbox"
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err == nil {
		err = pool.Ping(ctx)
	}
	if err != nil {
		if pool != nil {
			pool.Close()
		}
		return nil, nil, fmt.Errorf("connect to %s: %w", redact.URL(f.databaseURL), err)
	}
	return ob, pool, nil
}

// redact keeps the database password out of err's text.
func (f *outboxDBFlags) redact(err error) error { return redact.Error(err, f.databaseURL) }

func (o *outboxOptions) jsonFlag(fs *flagSet) {
	fs.Bool(&o.json, "json", "print JSON for scripts instead of text")
}

func (o *outboxOptions) limitFlag(fs *flagSet, def int) {
	fs.Int(&o.limit, "limit", "N", "at most N rows, oldest first; 0 means no limit", def)
}

func (o *outboxOptions) filterFlags(fs *flagSet) {
	fs.Var(&o.types, "type", "PREFIX", "only events whose type starts with PREFIX, e.g. workitem. (repeatable, or comma-separated)")
	fs.String(&o.entity, "entity", "ID", "only events of this entity_id", "")
	fs.Var(&o.ids, "id", "EVENT_ID", "only this event (repeatable, or comma-separated)")
}

// filters turns the filter flags into one outbox.Filter per --type prefix
// (a row matches any of them).
func (o *outboxOptions) filters() []outbox.Filter {
	base := outbox.Filter{EntityID: o.entity, EventIDs: o.ids, Limit: o.limit}
	if len(o.types) == 0 {
		return []outbox.Filter{base}
	}
	out := make([]outbox.Filter, len(o.types))
	for i, prefix := range o.types {
		out[i] = base
		out[i].EventTypePrefix = prefix
	}
	return out
}

func (o *outboxOptions) hasFilter() bool {
	return len(o.types) > 0 || o.entity != "" || len(o.ids) > 0
}

// outboxCall is one run of a subcommand, connected and with flags parsed.
type outboxCall struct {
	env    *cliEnv
	opts   *outboxOptions
	outbox *outbox.Table
	pool   *pgxpool.Pool
}

func runOutbox(ctx context.Context, env *cliEnv, args []string) error {
	p, err := outboxVerbs.parse(env, args)
	if err != nil {
		return err
	}
	sub, o := p.verb, p.opts
	if len(p.args) > 0 {
		return usagef("%s: unexpected argument %q", sub.name, p.args[0])
	}
	if err := o.validate(sub.name); err != nil {
		return err
	}
	if err := o.db.resolve(env); err != nil {
		return err
	}
	switch plane := o.db.schema == string(outbox.SchemaPlane); {
	case plane && sub.name == "purge":
		return usagef("purge: %v", outbox.ErrPlaneRowsAreKept)
	case plane && sub.name == "capture":
		// The triggers write warren's columns; Plane's table has others.
		return usagef("capture: the triggers write to a warren-schema outbox table only, and the schema is plane " +
			"(--schema or $WARREN_SCHEMA); pass --schema warren, and --table too if $WARREN_OUTBOX_TABLE names Plane's table")
	}
	o.db.lease, o.db.lockTimeout = time.Duration(o.lease), time.Duration(o.lockTimeout)
	ob, pool, err := o.db.open(ctx)
	if err != nil {
		return o.db.redact(err)
	}
	defer pool.Close()
	return o.db.redact(sub.run(ctx, &outboxCall{env: env, opts: o, outbox: ob, pool: pool}))
}

// validate checks the command line before anything touches the database.
func (o *outboxOptions) validate(sub string) error {
	switch {
	case o.limit < 0:
		return usagef("--limit must not be negative")
	case sub == "redrive" && !o.hasFilter() && !o.all:
		return usagef("redrive: give a filter (--type, --entity, --id) or --all")
	case sub == "redrive" && o.hasFilter() && o.all:
		return usagef("redrive: --all and filters exclude each other")
	case sub == "purge" && o.olderThan == 0:
		return usagef("purge: --older-than is required")
	case sub == "purge" && o.batch <= 0:
		return usagef("purge: --batch must be positive")
	case sub == "purge" && o.state != "all" && o.state != string(outbox.Delivered) && o.state != string(outbox.Dead):
		return usagef("purge: --state must be delivered, dead or all, not %q", o.state)
	case sub == "purge" && !o.yes:
		return usagef("purge deletes rows: pass --yes to confirm")
	case sub == "capture" && o.capture.Table == "":
		return usagef("capture: --source is required")
	case sub == "capture" && o.onFailure != string(capture.Fail) && o.onFailure != string(capture.Record):
		return usagef("capture: --on-failure must be fail or record, not %q", o.onFailure)
	case sub == "capture" && o.uninstall && o.print:
		return usagef("capture: --uninstall and --print exclude each other")
	}
	return nil
}

func runOutboxMigrate(ctx context.Context, c *outboxCall) error {
	res, err := c.outbox.Migrate(ctx, c.pool)
	if err != nil {
		return err
	}
	if c.outbox.Schema() == outbox.SchemaPlane {
		if res.From == res.To {
			fmt.Fprintf(c.env.stdout, "Plane's outbox %s has warren's optional columns (version %d)\n", res.Table, res.To)
		} else {
			fmt.Fprintf(c.env.stdout, "Plane's outbox %s: warren's optional columns migrated from version %d to %d\n", res.Table, res.From, res.To)
		}
		return nil
	}
	if res.From == res.To {
		fmt.Fprintf(c.env.stdout, "outbox %s is up to date (schema version %d)\n", res.Table, res.To)
		return nil
	}
	fmt.Fprintf(c.env.stdout, "outbox %s migrated from schema version %d to %d\n", res.Table, res.From, res.To)
	return nil
}

func runOutboxCapture(ctx context.Context, c *outboxCall) error {
	o := c.opts
	spec := o.capture
	spec.Outbox = c.outbox.Name()
	spec.Columns, spec.Exclude = o.captureColumns, o.captureExclude
	spec.OnFailure = capture.FailurePolicy(o.onFailure)
	if o.softDelete == "none" {
		spec.NoSoftDelete = true
	} else {
		spec.SoftDeleteColumn = o.softDelete
	}
	var (
		res capture.Result
		err error
	)
	switch {
	case o.print:
		m, err := capture.Generate(ctx, c.pool, spec)
		if err != nil {
			return captureError(err)
		}
		_, err = io.WriteString(c.env.stdout, m.SQL)
		return err
	case o.uninstall:
		res, err = capture.Uninstall(ctx, c.pool, spec.Table)
	default:
		res, err = capture.Install(ctx, c.pool, spec)
	}
	if err != nil {
		return captureError(err)
	}
	switch {
	case o.uninstall && res.Version == 0:
		fmt.Fprintf(c.env.stdout, "%s has no capture to uninstall\n", res.Name)
	case !res.Applied:
		fmt.Fprintf(c.env.stdout, "capture on %s is up to date (version %d)\n", res.Name, res.Version)
	case o.uninstall:
		fmt.Fprintf(c.env.stdout, "capture on %s uninstalled (version %d)\n", res.Name, res.Version)
	case res.Repaired != "":
		fmt.Fprintf(c.env.stdout, "capture on %s reinstalled: version %d, events to outbox %s (the SQL was unchanged, but %s)\n",
			res.Name, res.Version, c.outbox.Name(), res.Repaired)
	default:
		fmt.Fprintf(c.env.stdout, "capture on %s installed: version %d, events to outbox %s\n", res.Name, res.Version, c.outbox.Name())
	}
	return nil
}

// captureError makes a spec the catalog refutes a usage error (exit 2).
func captureError(err error) error {
	if errors.Is(err, capture.ErrInvalidSpec) {
		return usagef("capture: %v", err)
	}
	return err
}

// outboxStatsJSON is the --json form of outbox.Stats.
type outboxStatsJSON struct {
	Table                   string  `json:"table"`
	Schema                  string  `json:"schema"`
	Pending                 int64   `json:"pending"`
	InFlight                int64   `json:"in_flight"`
	Retrying                int64   `json:"retrying"`
	Lapsed                  int64   `json:"lapsed"`
	Dead                    int64   `json:"dead"`
	Delivered               int64   `json:"delivered"`
	OldestPendingAgeSeconds float64 `json:"oldest_pending_age_seconds"`
	CaptureErrors           int64   `json:"capture_errors"`
	// Slots are the CDC relay groups' replication slots on the table.
	Slots []slotJSON `json:"cdc_slots,omitempty"`
}

type slotJSON struct {
	Slot      string `json:"slot"`
	Active    bool   `json:"active"`
	LagBytes  int64  `json:"lag_bytes"`
	WALStatus string `json:"wal_status"`
}

// byteSize renders n bytes for a person.
func byteSize(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

func runOutboxStats(ctx context.Context, c *outboxCall) error {
	s, err := c.outbox.Stats(ctx, c.pool)
	if err != nil {
		return err
	}
	slots, err := cdc.Slots(ctx, c.pool, c.outbox.Name())
	if err != nil {
		return err
	}
	if c.opts.json {
		out := outboxStatsJSON{
			Table: c.outbox.Name(), Schema: string(c.outbox.Schema()), Pending: s.Pending, InFlight: s.InFlight, Retrying: s.Retrying, Lapsed: s.Lapsed,
			Dead: s.Dead, Delivered: s.Delivered, OldestPendingAgeSeconds: s.OldestPendingAge.Seconds(), CaptureErrors: s.CaptureErrors,
		}
		for _, sl := range slots {
			out.Slots = append(out.Slots, slotJSON{Slot: sl.Slot, Active: sl.Active, LagBytes: sl.LagBytes, WALStatus: sl.WALStatus})
		}
		return writeJSON(c.env.stdout, out)
	}
	w := tabwriter.NewWriter(c.env.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "outbox\t%s\t(%s schema)\n", c.outbox.Name(), c.outbox.Schema())
	plane := c.outbox.Schema() == outbox.SchemaPlane
	if plane {
		// Plane's table cannot tell a retry's wait from a claim in flight.
		fmt.Fprintf(w, "pending\t%d\t(in flight or retrying %d, lapsed claims %d)\n", s.Pending, s.InFlight, s.Lapsed)
	} else {
		fmt.Fprintf(w, "pending\t%d\t(in flight %d, retrying %d, lapsed claims %d)\n", s.Pending, s.InFlight, s.Retrying, s.Lapsed)
	}
	oldest := "-"
	if s.Pending > 0 {
		oldest = s.OldestPendingAge.Round(time.Second).String()
	}
	fmt.Fprintf(w, "oldest pending\t%s\n", oldest)
	fmt.Fprintf(w, "dead\t%d\n", s.Dead)
	if plane {
		fmt.Fprintf(w, "processed (kept until Plane's cleaner)\t%d\n", s.Delivered)
	} else {
		fmt.Fprintf(w, "delivered (kept)\t%d\n", s.Delivered)
	}
	if s.CaptureErrors > 0 {
		fmt.Fprintf(w, "capture errors\t%d\t(changes whose events were not written; see %s)\n", s.CaptureErrors, c.outbox.CaptureErrorsTable())
	}
	for _, sl := range slots {
		state := "no relay streams it"
		if sl.Active {
			state = "streaming"
		}
		// The lag is WAL the server keeps for the slot; it grows while no
		// relay streams and while the broker refuses (docs/cdc.md).
		fmt.Fprintf(w, "cdc slot %s\t%s\t(%s, WAL kept %s)\n", sl.Slot, state, sl.WALStatus, byteSize(sl.LagBytes))
	}
	return w.Flush()
}

// deadRows lists the rows matching any of the filters, oldest first.
func (c *outboxCall) deadRows(ctx context.Context) ([]outbox.Row, error) {
	seen := map[int64]bool{}
	var out []outbox.Row
	for _, f := range c.opts.filters() {
		rows, err := c.outbox.Dead(ctx, c.pool, f)
		if err != nil {
			return nil, err
		}
		for _, r := range rows {
			if !seen[r.ID] {
				seen[r.ID] = true
				out = append(out, r)
			}
		}
	}
	slices.SortFunc(out, func(a, b outbox.Row) int { return cmp.Compare(a.ID, b.ID) })
	if c.opts.limit > 0 && len(out) > c.opts.limit {
		out = out[:c.opts.limit]
	}
	return out, nil
}

func runOutboxDead(ctx context.Context, c *outboxCall) error {
	rows, err := c.deadRows(ctx)
	if err != nil {
		return err
	}
	if c.opts.json {
		out := make([]outboxRowJSON, len(rows))
		for i, r := range rows {
			if out[i], err = newOutboxRowJSON(r); err != nil {
				return err
			}
		}
		return writeJSON(c.env.stdout, out)
	}
	if len(rows) == 0 {
		fmt.Fprintln(c.env.stdout, "no dead rows match")
		return nil
	}
	now := time.Now()
	w := tabwriter.NewWriter(c.env.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "ID\tEVENT_ID\tTYPE\tATTEMPTS\tDIED\tERROR")
	for _, r := range rows {
		fmt.Fprintf(w, "%d\t%s\t%s\t%d\t%s\t%s\n", r.ID, cell(r.Event.ID, 40), cell(r.Event.Type, 30), r.Attempts, age(r.FinishedAt, now), cell(r.LastError, 80))
	}
	return w.Flush()
}

func runOutboxRedrive(ctx context.Context, c *outboxCall) error {
	var total int64
	for _, f := range c.opts.filters() {
		if c.opts.limit > 0 {
			f.Limit = c.opts.limit - int(total)
			if f.Limit <= 0 {
				break
			}
		}
		n, err := c.outbox.Redrive(ctx, c.pool, f)
		total += n
		if err != nil {
			return fmt.Errorf("%w (after redriving %d rows)", err, total)
		}
	}
	fmt.Fprintf(c.env.stdout, "redrove %d dead rows of outbox %s\n", total, c.outbox.Name())
	return nil
}

func runOutboxPurge(ctx context.Context, c *outboxCall) error {
	opts := outbox.PurgeOptions{Before: time.Now().Add(-time.Duration(c.opts.olderThan)), BatchSize: c.opts.batch}
	if c.opts.state != "all" {
		opts.States = []outbox.State{outbox.State(c.opts.state)}
	}
	if c.opts.archive != "" {
		f, err := os.OpenFile(c.opts.archive, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			return fmt.Errorf("open archive: %w; nothing was deleted", err)
		}
		defer f.Close()
		opts.Archive = archiveTo(f)
	}
	n, err := c.outbox.Purge(ctx, c.pool, opts)
	fmt.Fprintf(c.env.stdout, "purged %d rows of outbox %s\n", n, c.outbox.Name())
	return err
}

// archiveTo appends each batch to f as JSON Lines and syncs it: the rows are
// on disk before Purge deletes them.
func archiveTo(f *os.File) func(context.Context, []outbox.Row) error {
	return func(_ context.Context, rows []outbox.Row) error {
		enc := json.NewEncoder(f)
		enc.SetEscapeHTML(false)
		for _, r := range rows {
			line, err := newOutboxRowJSON(r)
			if err != nil {
				return err
			}
			if err := enc.Encode(line); err != nil {
				return fmt.Errorf("write %s: %w", f.Name(), err)
			}
		}
		if err := f.Sync(); err != nil {
			return fmt.Errorf("sync %s: %w", f.Name(), err)
		}
		return nil
	}
}

// outboxRowJSON is a row as the command prints and archives it: the event
// in its wire form, and the relay's bookkeeping.
type outboxRowJSON struct {
	ID         int64           `json:"id"`
	State      outbox.State    `json:"state"`
	Attempts   int             `json:"attempts"`
	LastError  string          `json:"last_error,omitempty"`
	InsertedAt time.Time       `json:"inserted_at"`
	FinishedAt *time.Time      `json:"finished_at,omitempty"`
	Event      json.RawMessage `json:"event"`
}

func newOutboxRowJSON(r outbox.Row) (outboxRowJSON, error) {
	event, err := json.Marshal(r.Event)
	if err != nil {
		return outboxRowJSON{}, fmt.Errorf("encode row %d: %w", r.ID, err)
	}
	out := outboxRowJSON{ID: r.ID, State: r.State, Attempts: r.Attempts, LastError: r.LastError, InsertedAt: r.InsertedAt, Event: event}
	if !r.FinishedAt.IsZero() {
		out.FinishedAt = &r.FinishedAt
	}
	return out, nil
}

func printOutboxUsage(w io.Writer) {
	fmt.Fprint(w, `Usage: warren outbox <subcommand> [flags]

Operate the transactional outbox table that 'warren relay run' drains.

Subcommands:
`)
	for _, s := range outboxSubs {
		fmt.Fprintf(w, "  %-8s %s\n", s.name, s.summary)
	}
	fmt.Fprintf(w, `
Common flags:
  --database-url URL  the Postgres database; default $DATABASE_URL, else %s
  --table NAME        the outbox table; default $WARREN_OUTBOX_TABLE, else %s
                      (outbox with --schema plane)
  --schema S          warren (default, or $WARREN_SCHEMA), or plane: Plane's own
                      outbox table, drained in place; dead and redrive need
                      'migrate --schema plane', purge is Plane's cleaner's job
  --lease DURATION    with --schema plane: the relays' lease (default 30s)

Passwords are never printed. Exit status: 0 success; 1 the operation failed;
2 the command line was wrong.
Run 'warren outbox <subcommand> --help' for a subcommand's flags.
`, defaultOutboxDatabaseURL, outbox.DefaultTable)
}
