package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/warrenmq/warren/cmd/warren/internal/archivefile"
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
		about: "Create the outbox table, its indexes and its migrations record, or apply the migrations it lacks. Safe to run at every deploy and from several places at once. A table dropped while its migrations record remained is created again, empty, and said so; one missing an index or constraint its migrations made is refused, naming each.",
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
		about: "List the rows the relay gave up on, oldest first, with their attempts and last error; a list cut by --limit says how many rows match. Columns are cut to fit only on a terminal. --json prints each whole row, event included, and every matching row unless --limit is given.",
		examples: []string{
			"warren outbox dead",
			"warren outbox dead --type workitem. --limit 0 --json",
		},
		flags: func(fs *flagSet, o *outboxOptions) { o.filterFlags(fs); o.limitFlag(fs, 20); o.jsonFlag(fs) },
		run:   runOutboxDead,
	},
	{
		name: "redrive", summary: "make dead rows pending again", changes: true,
		about: "Make the dead rows that match the filters pending again with their attempts reset, so the relay publishes them at once. Without a filter, --all is required. It says how many rows match and asks before changing them, unless --yes is given; without a terminal to ask on, --yes (or --dry-run) is required.",
		examples: []string{
			"warren outbox redrive --type workitem. --dry-run",
			"warren outbox redrive --id 0b7c5e2a-9f7d-4c1e-8a53-2f0f4f1c9d11",
			"warren outbox redrive --all --yes --json",
		},
		flags: func(fs *flagSet, o *outboxOptions) {
			o.filterFlags(fs)
			o.limitFlag(fs, 0)
			fs.Bool(&o.all, "all", "redrive every dead row (needed when no filter is given)")
			o.changeFlags(fs)
		},
		run: runOutboxRedrive,
	},
	{
		name: "purge", summary: "delete delivered and dead rows older than a cutoff", changes: true,
		about: "Delete finished rows (delivered rows kept by --keep-delivered, and dead rows) that finished more than --older-than ago, in batches, one transaction each. With --archive FILE each batch is first appended to FILE as JSON Lines and synced to disk; if that fails, the batch is not deleted and purge stops. Pending rows are never purged. It says how many rows match and asks before deleting them, unless --yes is given; without a terminal to ask on, --yes (or --dry-run) is required.",
		examples: []string{
			"warren outbox purge --older-than 7d --dry-run",
			"warren outbox purge --older-than 7d --yes",
			"warren outbox purge --older-than 2d --state dead --archive dead-rows.jsonl --yes",
		},
		flags: func(fs *flagSet, o *outboxOptions) {
			fs.Var(&o.olderThan, "older-than", "AGE", "purge rows that finished at least AGE ago: 36h, 7d; required")
			fs.String(&o.state, "state", "STATE", "which rows: delivered, dead or all", "all")
			fs.Int(&o.batch, "batch", "N", "rows per transaction", outbox.DefaultPurgeBatchSize)
			fs.String(&o.archive, "archive", "FILE", "append each batch to FILE (JSON Lines) before deleting it", "")
			o.changeFlags(fs)
		},
		run: runOutboxPurge,
	},
	{
		name: "capture", summary: "install triggers that write a table's changes to the outbox",
		about: "Generate, from the catalog, one trigger function for --source and its insert, update and delete triggers (statement-level; row-level on a partitioned table, a partition or an inheritance child, so that statements naming a partition, present or future, write their events too; a table with inheritance children is refused), which write <prefix>.created, .updated (previous_attributes: the old values of the changed tracked columns only; none for an update that changed nothing tracked) and .deleted (a hard delete, or --soft-delete-column going from NULL to a value) events to the outbox, in the changing statement's transaction. The column lists are written into the trigger: run this again after a migration changes the table. The SQL is applied in one transaction and recorded as the table's next version in " + capture.MigrationsTable + "; an unchanged result is not applied again, unless its triggers or function were dropped, disabled or edited since (then it is reinstalled, and the command says why). With --on-failure fail (the default) an event the outbox refuses fails the statement; with record the statement succeeds and the failure is written to the outbox's capture errors table, which 'warren outbox stats' and the relay's metrics count, except for errors a retry cures (deadlock, serialization failure, lock timeout), which still fail the statement. The triggers fire under session_replication_role = replica too; what a logical replication worker's writes do is --subscriber: refuse (the default: the replicated write fails, naming the subscription, until you choose), capture (this end writes their events) or skip (the publisher captures the same table; see docs/adr/024-capture-replication-role.md). TRUNCATE of the table or a partition is refused: DELETE writes the events. ATTACH PARTITION or INHERIT of a captured plain table is refused (uninstall, change, install again). The install refuses to reuse a function, outbox or table another role owns (or a table with triggers or rules), gives up on the table's lock after --lock-timeout naming who holds it, and refuses to move an installed capture to another outbox without --move-outbox. It writes to a warren-schema outbox only: with WARREN_SCHEMA=plane pass --schema warren. The initiator comes from the session settings --initiator-setting (default " + capture.DefaultInitiatorTypeSetting + ", unset: USER) and " + capture.DefaultInitiatorIDSetting + ".",
		examples: []string{
			"warren outbox capture --source issues --entity-type issue --event-prefix workitem --exclude description_html --workspace-column workspace_id --project-column project_id --print",
			"warren outbox capture --source labels --entity-type label --on-failure record --initiator-setting plane.initiator_type",
			"warren outbox capture --source labels --uninstall",
			"warren outbox capture --schema warren --source issues --profile plane-issues --print",
		},
		flags: func(fs *flagSet, o *outboxOptions) {
			c := &o.capture
			fs.String(&c.Table, "source", "TABLE", "the table to capture: name or schema.name; required", "")
			fs.String(&o.profile, "profile", "NAME", "plane-issues, plane-states, plane-labels, plane-issue-assignees, plane-issue-labels, plane-issue-comments, plane-issue-links, plane-issue-relations, plane-issue-attachments (file_assets), plane-cycle-issues or plane-module-issues: the events Plane's triggers write for that table (for issues: epic.* by issue type, .state.updated, assignee_ids and label_ids; for what an issue has: the issue's .assignee.added, .comment.created, .link.added, .cycle.moved and the rest; for all: Plane's payload shapes, no event for timestamp-only writes; see docs/plane.md), which sets every flag that shapes the events", "")
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
			fs.String(&o.subscriber, "subscriber", "POLICY", "what a logical replication worker's writes do: refuse, capture (write their events) or skip (the publisher captures this table)", string(capture.SubscriberRefuse))
			fs.String(&c.Version, "event-version", "V", "each event's version field (default none)", "")
			fs.Bool(&o.print, "print", "print the SQL, in the transaction that applies it (without recording it), and apply nothing")
			fs.Var(&o.lockTimeout, "lock-timeout", "DURATION", fmt.Sprintf("how long the install may wait for the table's lock, while every write of the table queues behind it, before it gives up, changing nothing and naming the sessions holding it (default %v)", outbox.DefaultLockTimeout))
			fs.Bool(&o.uninstall, "uninstall", "drop the table's capture triggers and function")
			fs.Bool(&o.capture.MoveOutbox, "move-outbox", "let the install change the outbox an installed capture of the table writes to (refused without it)")
		},
		run: runOutboxCapture,
	},
}

// outboxOptions holds every flag of every subcommand; each registers its
// own.
type outboxOptions struct {
	db                 outboxDBFlags
	lease, lockTimeout ageFlag

	json, all, yes, dryRun bool
	types, ids             listFlag
	entity                 string
	limit, batch           int
	olderThan              ageFlag
	state, archive         string

	capture                        capture.Spec
	captureColumns, captureExclude listFlag
	softDelete, onFailure          string
	subscriber, profile            string
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

func (o *outboxOptions) changeFlags(fs *flagSet) {
	fs.Bool(&o.dryRun, "dry-run", "say how many rows would be changed and change nothing")
	fs.Bool(&o.yes, "yes", "do not ask for confirmation")
	o.jsonFlag(fs)
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
// (a row matches any of them). A prefix that extends another one given is
// left out: the filters then select disjoint rows, so their counts add up.
func (o *outboxOptions) filters() []outbox.Filter {
	base := outbox.Filter{EntityID: o.entity, EventIDs: o.ids, Limit: o.limit}
	if len(o.types) == 0 {
		return []outbox.Filter{base}
	}
	var out []outbox.Filter
	for i, prefix := range o.types {
		subsumed := slices.ContainsFunc(o.types, func(p string) bool { return p != prefix && strings.HasPrefix(prefix, p) }) ||
			slices.Index(o.types, prefix) < i
		if !subsumed {
			f := base
			f.EventTypePrefix = prefix
			out = append(out, f)
		}
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
	if err := o.validate(sub); err != nil {
		return err
	}
	if err := o.db.resolve(env); err != nil {
		return err
	}
	if o.json && sub.name == "dead" && !p.fs.isSet("limit") {
		o.limit = 0 // scripts get every row unless they ask for fewer
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
	// Human output names the database first: with several environments a
	// count that does not say where it came from misleads. (--print's SQL
	// goes to psql, and --json to scripts, as they are.)
	if !o.json && !o.print {
		printDatabase(env.stdout, o.db.databaseURL, o.db.table)
	}
	ob, pool, err := o.db.open(ctx)
	if err != nil {
		return o.db.redact(err)
	}
	defer pool.Close()
	err = sub.run(ctx, &outboxCall{env: env, opts: o, outbox: ob, pool: pool})
	if sub.name != "capture" && sub.name != "migrate" && isUndefinedTable(err) {
		// The raw error names a relation; say what to run.
		if ob.Schema() == outbox.SchemaPlane {
			return fmt.Errorf("table %s does not exist in %s: check --table or $WARREN_OUTBOX_TABLE (Plane's migrations create it)", ob.Name(), redact.URL(o.db.databaseURL))
		}
		return fmt.Errorf("table %s does not exist in %s: run 'warren outbox migrate'", ob.Name(), redact.URL(o.db.databaseURL))
	}
	return o.db.redact(err)
}

// isUndefinedTable reports whether err is Postgres's undefined_table
// (SQLSTATE 42P01).
func isUndefinedTable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42P01"
}

// validate checks the command line before anything touches the database.
func (o *outboxOptions) validate(verb *outboxSub) error {
	sub := verb.name
	switch {
	case verb.changes && !o.dryRun && !o.yes && !isTerminal(dlqStdin):
		return usagef("%s changes rows: pass --yes to confirm, or --dry-run to see what it would change (there is no terminal to ask on)", sub)
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
	case sub == "capture" && o.capture.Table == "":
		return usagef("capture: --source is required")
	case sub == "capture" && o.onFailure != string(capture.Fail) && o.onFailure != string(capture.Record):
		return usagef("capture: --on-failure must be fail or record, not %q", o.onFailure)
	case sub == "capture" && !slices.Contains([]string{string(capture.SubscriberRefuse), string(capture.SubscriberCapture), string(capture.SubscriberSkip)}, o.subscriber):
		return usagef("capture: --subscriber must be refuse, capture or skip, not %q", o.subscriber)
	case sub == "capture" && o.uninstall && o.print:
		return usagef("capture: --uninstall and --print exclude each other")
	case sub == "capture" && o.profile != "" && captureProfiles[o.profile] == nil:
		return usagef("capture: --profile must be %s, not %q", profileNames(), o.profile)
	case sub == "capture" && o.profile != "" && o.shapedByFlags():
		return usagef("capture: --profile %s sets what --entity-type, --event-prefix, --entity-id-column, --columns, --exclude, --workspace-column, --project-column, --soft-delete-column, --initiator-setting and --initiator-id-setting would; give it alone", o.profile)
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
	switch {
	case res.Recreated:
		reportRecreated(c.env.stdout, res)
	case res.From == res.To:
		fmt.Fprintf(c.env.stdout, "outbox %s is up to date (schema version %d)\n", res.Table, res.To)
	default:
		fmt.Fprintf(c.env.stdout, "outbox %s migrated from schema version %d to %d\n", res.Table, res.From, res.To)
	}
	return nil
}

// reportRecreated says that Migrate created the table again because it
// was missing though its migrations record remained: the rows it held
// are gone, which the operator must hear of.
func reportRecreated(out io.Writer, res outbox.MigrateResult) {
	if res.Recreated {
		fmt.Fprintf(out, "outbox %s did not exist though its migrations record said schema version %d (dropped?): created it again, empty, at schema version %d; the events it held are gone unless a backup has them\n", res.Table, res.From, res.To)
	}
}

// captureProfiles are --profile's values.
var captureProfiles = map[string]func(context.Context, outbox.DB, string) (capture.Spec, error){
	"plane-issues":            capture.PlaneIssues,
	"plane-states":            capture.PlaneStates,
	"plane-labels":            capture.PlaneLabels,
	"plane-issue-assignees":   besideTheIssues(capture.PlaneIssueAssignees),
	"plane-issue-labels":      besideTheIssues(capture.PlaneIssueLabels),
	"plane-issue-comments":    besideTheIssues(capture.PlaneIssueComments),
	"plane-issue-links":       besideTheIssues(capture.PlaneIssueLinks),
	"plane-issue-relations":   besideTheIssues(capture.PlaneIssueRelations),
	"plane-issue-attachments": besideTheIssues(capture.PlaneIssueAttachments),
	"plane-cycle-issues":      besideTheIssues(capture.PlaneCycleIssues),
	"plane-module-issues":     besideTheIssues(capture.PlaneModuleIssues),
}

// profileNames are captureProfiles' keys, sorted, for messages.
func profileNames() string {
	names := slices.Sorted(maps.Keys(captureProfiles))
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// besideTheIssues is a profile of a table of what Plane's issues have,
// reading the issues table beside it.
func besideTheIssues(profile func(ctx context.Context, db outbox.DB, table, issues string) (capture.Spec, error)) func(context.Context, outbox.DB, string) (capture.Spec, error) {
	return func(ctx context.Context, db outbox.DB, table string) (capture.Spec, error) {
		return profile(ctx, db, table, besideIssues(table))
	}
}

// besideIssues is the issues table in table's schema, as Plane keeps them.
func besideIssues(table string) string {
	if schema, _, ok := strings.Cut(table, "."); ok {
		return schema + ".issues"
	}
	return "issues"
}

// shapedByFlags is true when a flag that shapes the events was given.
func (o *outboxOptions) shapedByFlags() bool {
	c := o.capture
	return c.EntityType != "" || c.EventPrefix != "" || c.EntityIDColumn != "" || len(o.captureColumns) > 0 || len(o.captureExclude) > 0 ||
		c.WorkspaceColumn != "" || c.ProjectColumn != "" || o.softDelete != "" || c.InitiatorTypeSetting != "" || c.InitiatorIDSetting != ""
}

func runOutboxCapture(ctx context.Context, c *outboxCall) error {
	o := c.opts
	spec := o.capture
	if o.profile != "" && !o.uninstall {
		profile, err := captureProfiles[o.profile](ctx, c.pool, spec.Table)
		if err != nil {
			return captureError(err)
		}
		profile.Version, profile.MoveOutbox = spec.Version, spec.MoveOutbox
		spec = profile
		o.captureColumns, o.captureExclude = spec.Columns, spec.Exclude
		o.softDelete = spec.SoftDeleteColumn
	}
	spec.Outbox = c.outbox.Name()
	spec.Columns, spec.Exclude = o.captureColumns, o.captureExclude
	spec.OnFailure = capture.FailurePolicy(o.onFailure)
	spec.Subscriber = capture.SubscriberPolicy(o.subscriber)
	spec.LockTimeout = time.Duration(o.lockTimeout)
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
		_, err = io.WriteString(c.env.stdout, printable(m, spec.LockTimeout))
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

// printable is the migration as a script to apply by hand: in one
// transaction, holding the table's lock as Install does (which m's SQL
// needs: it names the table's columns as the catalog had them), and
// giving up on the lock after lockTimeout. Applied so, it is not
// recorded in capture.MigrationsTable: the next Install applies its own.
func printable(m capture.Migration, lockTimeout time.Duration) string {
	schema, table, _ := strings.Cut(m.Name, ".")
	return fmt.Sprintf("BEGIN;\nSET LOCAL lock_timeout = '%dms';\nLOCK TABLE %s IN SHARE ROW EXCLUSIVE MODE;\n%sCOMMIT;\n",
		cmp.Or(lockTimeout, outbox.DefaultLockTimeout).Milliseconds(), pgx.Identifier{schema, table}.Sanitize(), m.SQL)
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

// countDead counts the dead rows the filters match, --limit aside.
func (c *outboxCall) countDead(ctx context.Context) (int, error) {
	counts, err := c.countDeadEach(ctx)
	var total int64
	for _, n := range counts {
		total += n
	}
	return int(total), err
}

// countDeadEach counts the dead rows of each of the command's filters.
func (c *outboxCall) countDeadEach(ctx context.Context) ([]int64, error) {
	filters := c.opts.filters()
	counts := make([]int64, len(filters))
	for i, f := range filters {
		n, err := c.outbox.CountDead(ctx, c.pool, f)
		if err != nil {
			return nil, err
		}
		counts[i] = n
	}
	return counts, nil
}

func runOutboxDead(ctx context.Context, c *outboxCall) error {
	rows, err := c.deadRows(ctx)
	if err != nil {
		return err
	}
	total := len(rows)
	if c.opts.limit > 0 && len(rows) == c.opts.limit {
		if total, err = c.countDead(ctx); err != nil {
			return err
		}
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
	width := columnWidth(c.env.stdout)
	w := tabwriter.NewWriter(c.env.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "ID\tEVENT_ID\tTYPE\tATTEMPTS\tDIED\tERROR")
	for _, r := range rows {
		fmt.Fprintf(w, "%d\t%s\t%s\t%d\t%s\t%s\n", r.ID, cell(r.Event.ID, width(40)), cell(r.Event.Type, width(30)), r.Attempts, age(r.FinishedAt, now), cell(r.LastError, width(80)))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	showing(c.env.stdout, len(rows), total, "--limit 0 shows them all")
	return nil
}

// outboxChangeJSON is the --json result of redrive and purge.
type outboxChangeJSON struct {
	Table   string `json:"table"`
	DryRun  bool   `json:"dry_run"`
	Matched int64  `json:"matched"` // rows the command found to change
	Changed int64  `json:"changed"` // rows it changed: 0 in a dry run
}

// plan says how many rows a changing verb will touch, and then either
// stops there (--dry-run), or asks unless --yes was given (validate made
// sure there is a terminal to ask on). It returns whether to go ahead.
func (c *outboxCall) plan(ctx context.Context, matched int64, verb, what string) (bool, error) {
	o := c.opts
	if o.dryRun {
		if o.json {
			return false, writeJSON(c.env.stdout, outboxChangeJSON{Table: c.outbox.Name(), DryRun: true, Matched: matched})
		}
		fmt.Fprintf(c.env.stdout, "would %s %d %s of outbox %s (dry run: nothing changed)\n", verb, matched, what, c.outbox.Name())
		return false, nil
	}
	if matched == 0 {
		if o.json {
			return false, writeJSON(c.env.stdout, outboxChangeJSON{Table: c.outbox.Name()})
		}
		fmt.Fprintf(c.env.stdout, "no %s of outbox %s match; nothing to do\n", what, c.outbox.Name())
		return false, nil
	}
	if !o.yes {
		if err := confirm(ctx, c.env, dlqStdin, fmt.Sprintf("%s %d %s of outbox %s?", verb, matched, what, c.outbox.Name())); err != nil {
			return false, err
		}
	}
	return true, nil
}

func runOutboxRedrive(ctx context.Context, c *outboxCall) error {
	// The rows are listed now, each filter's within what is left of
	// --limit, and the redrive then takes exactly those (by id): a row
	// that dies while the question waits is never redriven without being
	// counted and confirmed, nor does it take the place of one that was.
	var ids []int64
	seen := map[int64]bool{} // rows two filters both match count once
	for _, f := range c.opts.filters() {
		if c.opts.limit > 0 {
			if f.Limit = c.opts.limit - len(ids); f.Limit <= 0 {
				break
			}
		}
		listed, err := c.outbox.DeadIDs(ctx, c.pool, f)
		if err != nil {
			return err
		}
		for _, id := range listed {
			if !seen[id] {
				seen[id] = true
				ids = append(ids, id)
			}
		}
	}
	matched := int64(len(ids))
	if ok, err := c.plan(ctx, matched, "redrive", "dead rows"); !ok || err != nil {
		return err
	}
	total, err := c.outbox.Redrive(ctx, c.pool, outbox.Filter{IDs: ids, Limit: len(ids)})
	if err != nil {
		return fmt.Errorf("%w (after redriving %d rows)", err, total)
	}
	if gone := matched - total; gone > 0 && !c.opts.json {
		fmt.Fprintf(c.env.stdout, "%d of the dead rows counted were no longer dead (redriven or purged meanwhile)\n", gone)
	}
	if c.opts.json {
		return writeJSON(c.env.stdout, outboxChangeJSON{Table: c.outbox.Name(), Matched: matched, Changed: total})
	}
	fmt.Fprintf(c.env.stdout, "redrove %d dead rows of outbox %s\n", total, c.outbox.Name())
	return nil
}

func runOutboxPurge(ctx context.Context, c *outboxCall) error {
	opts := outbox.PurgeOptions{Before: time.Now().Add(-time.Duration(c.opts.olderThan)), BatchSize: c.opts.batch}
	if c.opts.state != "all" {
		opts.States = []outbox.State{outbox.State(c.opts.state)}
	}
	matched, err := c.outbox.CountPurgeable(ctx, c.pool, opts)
	if err != nil {
		return err
	}
	if ok, err := c.plan(ctx, matched, "purge", "finished rows"); !ok || err != nil {
		return err
	}
	if c.opts.archive != "" {
		f, err := archivefile.Append(c.opts.archive)
		if err != nil {
			return fmt.Errorf("open archive: %w; nothing was deleted", err)
		}
		defer f.Close()
		opts.Archive = archiveTo(f)
	}
	n, err := c.outbox.Purge(ctx, c.pool, opts)
	if c.opts.json {
		if jerr := writeJSON(c.env.stdout, outboxChangeJSON{Table: c.outbox.Name(), Matched: matched, Changed: n}); err == nil {
			err = jerr
		}
		return err
	}
	fmt.Fprintf(c.env.stdout, "purged %d rows of outbox %s\n", n, c.outbox.Name())
	return err
}

// archiveTo appends each batch to f as JSON Lines and syncs it, and its
// directory: the rows, and the file's name, are on disk before Purge
// deletes them.
func archiveTo(f *archivefile.File) func(context.Context, []outbox.Row) error {
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
		return f.Sync()
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
