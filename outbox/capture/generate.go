package capture

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	"github.com/warrenmq/warren/outbox"
)

// Migration is the SQL that installs one table's capture: its trigger
// function and triggers (and, for the Record policy, the capture errors
// table). Applying it twice is harmless; [Install] applies it once per
// change.
type Migration struct {
	// Name is the captured table, schema-qualified ("public.issues"): the
	// name the migration is recorded under.
	Name     string
	SQL      string
	Checksum string // SHA-256 of SQL, hex

	// installs is what the SQL creates, which Install checks is still in
	// place before it calls an unchanged migration applied; nil for
	// Uninstall's.
	installs *objects
}

// objects are a capture's function and triggers as its SQL creates them.
type objects struct {
	source     string    // the captured table, quoted
	outbox     string    // the outbox it writes to, quoted, schema-qualified
	errors     string    // under Record, the capture errors table, quoted, schema-qualified
	partitions []string  // its partitions at every level, quoted
	function   string    // the function's signature, quoted: "public"."issues_warren_capture"()
	body       string    // the function's body, as pg_proc.prosrc holds it
	triggers   []trigger // on source; the row-level ones and the TRUNCATE one on each partition too
}

// trigger is one of the capture's triggers.
type trigger struct {
	name, event string // event: INSERT, UPDATE, DELETE or TRUNCATE
	row         bool   // FOR EACH ROW
	replicaOnly bool   // ENABLE REPLICA, else ENABLE ALWAYS
	guard       bool   // the guard: never fires, see triggerGuard
}

// sources are where a trigger call reads its rows from: the statement's
// transition tables, or the row-level call's NEW and OLD.
type sources struct{ new, old string }

var (
	statementRows = sources{newRows, oldRows}
	rowRows       = sources{"(SELECT NEW.*)", "(SELECT OLD.*)"}
)

// The names the generated objects use.
const (
	triggerInsert   = "warren_capture_insert"
	triggerUpdate   = "warren_capture_update"
	triggerDelete   = "warren_capture_delete"
	triggerTruncate = "warren_capture_truncate"
	// The row-level triggers of a statement-level capture, enabled for
	// replica sessions only: logical replication's apply worker fires
	// row-level triggers only.
	triggerReplicaInsert = "warren_capture_replica_insert"
	triggerReplicaUpdate = "warren_capture_replica_update"
	triggerReplicaDelete = "warren_capture_replica_delete"
	// The guard of a statement-level capture: a row-level trigger with a
	// transition table, WHEN (false) so that it never fires, which
	// PostgreSQL does not allow on a partition or an inheritance child.
	// It makes ALTER TABLE … ATTACH PARTITION and INHERIT refuse the
	// table, whose statement-level triggers would not fire for statements
	// naming the new parent.
	triggerGuard = "warren_capture_guard"
	guardRows    = "warren_guard_rows"
	newRows      = "warren_new_rows" // the statement's transition tables
	oldRows      = "warren_old_rows"
	// functionConfig is the function's SET clause as pg_proc.proconfig
	// holds it. The search_path is pinned so that nothing on the writing
	// session's path (a look-alike jsonb_build_object, =, or text in a
	// schema it can create in) is what the function calls; the function
	// names every function it calls with its schema besides. The output
	// settings are pinned because the change test and the payload are
	// made of the columns' text forms, which the writer's settings change:
	// extra_float_digits below 1 rounds floats (a changed float would
	// write no event), and bytea_output, IntervalStyle, DateStyle,
	// TimeZone (timestamptz) and lc_monetary (money) change the payload's
	// text for the same row.
	functionConfig = "jit=off\nsearch_path=pg_catalog, pg_temp\nextra_float_digits=3\nbytea_output=hex\n" +
		"IntervalStyle=postgres\nDateStyle=ISO, MDY\nTimeZone=UTC\nlc_monetary=C"
	// functionSettings is the same as CREATE FUNCTION's SET clauses.
	functionSettings = "SET jit = off SET search_path = pg_catalog, pg_temp SET extra_float_digits = 3 SET bytea_output = hex\n" +
		"\tSET IntervalStyle = postgres SET DateStyle = 'ISO, MDY' SET TimeZone = 'UTC' SET lc_monetary = 'C'"
)

// outputSettings sets, for the transaction, functionConfig's settings of
// the columns' text forms (not its search_path: the caller's statements
// name types as its path finds them).
func outputSettings() string {
	var sets []string
	for _, line := range strings.Split(functionConfig, "\n") {
		name, value, _ := strings.Cut(line, "=")
		if name != "search_path" && name != "jit" {
			sets = append(sets, "pg_catalog.set_config("+literal(name)+", "+literal(value)+", true)")
		}
	}
	return "SELECT " + strings.Join(sets, ", ")
}

// maxBuildPairs is how many key-value pairs one jsonb_build_object call
// takes: Postgres functions take at most 100 arguments.
const maxBuildPairs = 50

// plan is a Spec resolved against the catalog: everything the SQL needs.
type plan struct {
	spec   Spec
	source *table
	// rowLevel: the table is in a partition or inheritance hierarchy, and
	// only row-level triggers fire for every statement that writes its
	// rows (PostgreSQL clones them to every partition, present and
	// future).
	rowLevel   bool
	tracked    []column
	key        []string // primary key, pairs old and new rows
	entityID   string
	softDelete string // "" when off
	// entityIDNullable: Only let a nullable EntityIDColumn through; a
	// row without an entity id names no entity and writes no event.
	entityIDNullable bool
	outbox           string // quoted, schema-qualified
	errors           string // quoted, schema-qualified capture errors table
	errorsName       string // the same, unquoted, for messages
	channel          string
	shape            shaping
}

// Generate reads the table's columns and key from the catalog and returns
// the migration that captures its changes as spec says. It changes
// nothing. The outbox table must exist at this build's schema version.
func Generate(ctx context.Context, db outbox.DB, spec Spec) (Migration, error) {
	p, err := resolve(ctx, db, spec)
	if err != nil {
		return Migration{}, err
	}
	sql, installs := p.sql()
	sum := sha256.Sum256([]byte(sql))
	return Migration{Name: p.name(), SQL: sql, Checksum: hex.EncodeToString(sum[:]), installs: installs}, nil
}

func resolve(ctx context.Context, db outbox.DB, spec Spec) (*plan, error) {
	spec, err := spec.withDefaults()
	if err != nil {
		return nil, err
	}
	ob, err := outbox.New(spec.Outbox)
	if err != nil {
		return nil, invalidf("Outbox: %v", err)
	}
	if err := ob.CheckSchema(ctx, db); err != nil {
		return nil, fmt.Errorf("capture %s: %w", spec.Table, err)
	}
	var outboxSchema string
	err = db.QueryRow(ctx, `SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = to_regclass($1)`,
		quote(ob.Name())).Scan(&outboxSchema)
	if err != nil {
		return nil, fmt.Errorf("capture %s: find the outbox table's schema: %w", spec.Table, err)
	}
	src, err := readTable(ctx, db, spec.Table)
	if err != nil {
		return nil, err
	}
	// The events' own tables: capturing one would write an event for
	// each event (or failure) written, without end.
	for _, own := range []string{ob.Name(), ob.CaptureErrorsTable()} {
		if src.schema == outboxSchema && src.name == own {
			return nil, invalidf("%s.%s is the outbox's own table; capturing it would write events about its events without end", src.schema, src.name)
		}
	}
	p := &plan{
		spec: spec, source: src, channel: ob.Channel(),
		outbox: quote(outboxSchema) + "." + quote(ob.Name()),
		errors: quote(outboxSchema) + "." + quote(ob.CaptureErrorsTable()),

		errorsName: outboxSchema + "." + ob.CaptureErrorsTable(),
	}
	if err := p.resolveColumns(); err != nil {
		return nil, err
	}
	if err := p.resolveShaping(ctx, db); err != nil {
		return nil, err
	}
	// What the trigger writes to runs as every writer of the captured
	// table: a trigger on the outbox (another capture's, which would also
	// make two captures write each other's events without end) or an
	// outbox owned by another role is refused.
	writes := []string{p.outbox}
	if spec.OnFailure == Record {
		writes = append(writes, p.errors)
	}
	for _, rel := range writes {
		if err := ownTable(ctx, db, rel); err != nil {
			return nil, fmt.Errorf("capture %s: %w", spec.Table, err)
		}
	}
	p.rowLevel = src.inHierarchy
	return p, nil
}

func (p *plan) name() string { return p.source.schema + "." + p.source.name }

// resolveColumns picks the tracked columns, the key, the entity id and the
// soft delete column, refusing a name the table does not have.
func (p *plan) resolveColumns() error {
	t, spec := p.source, p.spec
	need := func(what, name string) error {
		if _, ok := t.column(name); !ok {
			return invalidf("%s: table %s has no column %q", what, p.name(), name)
		}
		return nil
	}
	if len(spec.Columns) == 0 {
		p.tracked = slices.Clone(t.columns)
	}
	for _, name := range spec.Columns {
		if err := need("Columns", name); err != nil {
			return err
		}
		if slices.ContainsFunc(p.tracked, func(c column) bool { return c.name == name }) {
			return invalidf("Columns names %q twice", name)
		}
		c, _ := t.column(name)
		p.tracked = append(p.tracked, c)
	}
	for _, name := range spec.Exclude {
		if err := need("Exclude", name); err != nil {
			return err
		}
		p.tracked = slices.DeleteFunc(p.tracked, func(c column) bool { return c.name == name })
	}
	if len(p.tracked) == 0 {
		return invalidf("no column of %s is left to track", p.name())
	}

	p.key = t.primaryKey
	switch {
	case len(p.key) == 0:
		return invalidf("table %s has no primary key; the update trigger pairs each row's old and new versions by it", p.name())
	case t.deferrableKey:
		return invalidf("table %s has a DEFERRABLE primary key: two rows may share a key between a transaction's statements, and the update trigger pairing old and new versions by it would write the wrong events; make it NOT DEFERRABLE", p.name())
	}
	p.entityID = spec.EntityIDColumn
	switch {
	case p.entityID != "":
		if err := need("EntityIDColumn", p.entityID); err != nil {
			return err
		}
		// With Only, a row's entity id may be NULL: Plane's files have
		// an issue when they are its attachments, and its avatars none.
		if c, _ := t.column(p.entityID); !c.notNull {
			if spec.Only == nil {
				return invalidf("EntityIDColumn %q of %s may be NULL; every event needs an entity id: make it NOT NULL", p.entityID, p.name())
			}
			p.entityIDNullable = true
		}
		// A change of the entity id is the old entity's end and a new
		// one's start, as a key change is: pairing by it too makes it
		// .deleted and .created.
		if !slices.Contains(p.key, p.entityID) {
			p.key = append(slices.Clone(p.key), p.entityID)
		}
	case len(p.key) > 1:
		return invalidf("table %s has a composite primary key (%s); set EntityIDColumn to the column that identifies the entity",
			p.name(), strings.Join(p.key, ", "))
	default:
		p.entityID = p.key[0]
	}
	for what, name := range map[string]string{"WorkspaceColumn": spec.WorkspaceColumn, "ProjectColumn": spec.ProjectColumn} {
		if name != "" {
			if err := need(what, name); err != nil {
				return err
			}
		}
	}
	switch {
	case spec.NoSoftDelete:
	case spec.SoftDeleteColumn != "":
		if err := need("SoftDeleteColumn", spec.SoftDeleteColumn); err != nil {
			return err
		}
		// A live row is one whose soft delete column is NULL, and a hard
		// DELETE of a row that is not writes no event (its .deleted was
		// written when the column was set): on a NOT NULL column every
		// DELETE would commit without its event.
		if c, _ := t.column(spec.SoftDeleteColumn); c.notNull {
			return invalidf("SoftDeleteColumn %q of table %s is NOT NULL: a soft delete is the column going from NULL to a value, so every row would count as deleted already and its DELETE would write no event", spec.SoftDeleteColumn, p.name())
		}
		p.softDelete = spec.SoftDeleteColumn
	default:
		// Taken by its name only when it can mean a soft delete (see above):
		// a NOT NULL deleted_at (say DEFAULT 'infinity') is an ordinary
		// column, and DELETEs write their events.
		if c, ok := t.column(DefaultSoftDeleteColumn); ok && !c.notNull {
			p.softDelete = DefaultSoftDeleteColumn
		}
	}
	return nil
}

// ref is a column of one side of the statement: n (the new row) or o (the
// old one).
func ref(side, col string) string { return side + "." + quote(col) }

// data is the JSON object of a row's tracked columns, keyed by name.
func (p *plan) data(side string) string {
	var parts []string
	for chunk := range slices.Chunk(p.tracked, maxBuildPairs) {
		var args []string
		for _, c := range chunk {
			args = append(args, literal(c.name), ref(side, c.name))
		}
		parts = append(parts, "pg_catalog.jsonb_build_object("+strings.Join(args, ", ")+")")
	}
	return strings.Join(parts, "\n\t\t\t|| ")
}

// changed is the JSON object of the old values of the tracked columns an
// update changed; '{}' when it changed none. A column changed when its
// text form did, not when the type's = operator says so: = calls numeric
// 1.0 and 1.00 equal, and 'A' and 'a' under citext or a case-insensitive
// collation, although the payload shows them apart (and jsonb's = also
// calls 1.0 and 1.00 equal). Every type has a text form, which its JSON
// form is made from, so a value whose JSON changed has a changed text;
// the reverse differs only for json, whose re-spacing is an event with the
// same payload. The text form also compares the types that have no = at
// all (json, xml, point), and costs a bulk update about what = did, where
// comparing to_jsonb(…)::text made it a quarter slower.
func (p *plan) changed() string {
	var parts []string
	for _, c := range p.compared() {
		old := ref("o", c.name)
		if p.shape.plane {
			old += "::text"
		}
		// COLLATE "C": a text column's collation survives the cast, and a
		// case-insensitive one would call 'A' and 'a' equal again.
		o, n := ref("o", c.name)+`::text COLLATE "C"`, ref("n", c.name)+`::text COLLATE "C"`
		parts = append(parts, fmt.Sprintf("CASE WHEN %s IS DISTINCT FROM %s THEN pg_catalog.jsonb_build_object(%s, %s) ELSE '{}'::jsonb END",
			o, n, literal(c.name), old))
	}
	return strings.Join(parts, "\n\t\t\t|| ")
}

// envelope is the select list of one event, for the row on side: every
// column the insert names but the event type and the payload.
func (p *plan) envelope(side string) (entityID, workspace, project string) {
	entityID = ref(side, p.entityID) + "::text"
	workspace, project = "''", "NULL"
	if c := p.spec.WorkspaceColumn; c != "" {
		workspace = "coalesce(" + ref(side, c) + "::text, '')"
	}
	if c := p.spec.ProjectColumn; c != "" {
		project = ref(side, c) + "::text"
	}
	return entityID, workspace, project
}

const insertColumns = "event_id, event_type, entity_type, entity_id, workspace_id, project_id, initiator_id, initiator_type, payload, version"

// entityType is the entity_type of a .created event, or of any other.
func (p *plan) entityType(created bool) string {
	if !created && p.spec.ChangedEntityType != "" {
		return literal(p.spec.ChangedEntityType)
	}
	return literal(p.spec.EntityType)
}

// insert is the INSERT … SELECT that writes one event per selected row.
func (p *plan) insert(eventType, entityType, entityID, workspace, project, initiator, payload, from string) string {
	version := "NULL"
	if p.spec.Version != "" {
		version = literal(p.spec.Version)
	}
	return fmt.Sprintf(`INSERT INTO %s (%s)
		SELECT pg_catalog.gen_random_uuid()::text,
			%s,
			%s,
			%s,
			%s,
			%s,
			%s,
			coalesce(nullif(pg_catalog.current_setting(%s, true), ''), %s),
			%s,
			%s
		%s;`,
		p.outbox, insertColumns, eventType, entityType, entityID, workspace, project,
		initiator, literal(p.spec.InitiatorTypeSetting), literal(DefaultInitiatorType),
		payload, version, from)
}

// only is the condition Spec.Only puts on the rows on sides, one of which
// must meet it; "TRUE" without it. A row without an entity id names no
// entity, so it meets no condition.
func (p *plan) only(sides ...string) string {
	o := p.spec.Only
	if o == nil {
		return "TRUE"
	}
	var meet []string
	for _, side := range sides {
		m := ref(side, o.Column) + `::text COLLATE "C" = ` + literal(o.Value) + ` COLLATE "C"`
		if p.entityIDNullable {
			m += " AND " + ref(side, p.entityID) + " IS NOT NULL"
		}
		meet = append(meet, "("+m+")")
	}
	return "(" + strings.Join(meet, " OR ") + ")"
}

// samePair is true when the rows a and b are versions of one row of one
// entity: the same key and entity id. A nullable entity id is compared so
// that NULL pairs with NULL, which = would not (and a FULL JOIN takes only
// conditions it can hash or merge, which IS NOT DISTINCT FROM is not).
func (p *plan) samePair(a, b string) string {
	if !p.entityIDNullable {
		return sameKey(p.key, a, b)
	}
	key := slices.DeleteFunc(slices.Clone(p.key), func(k string) bool { return k == p.entityID })
	orNull := func(side string) string {
		return `coalesce('v' || ` + ref(side, p.entityID) + `::text, 'n') COLLATE "C"`
	}
	return sameKey(key, a, b) + " AND " + orNull(a) + " = " + orNull(b)
}

// live is the condition that the row on side is not soft deleted.
func (p *plan) live(side string) string {
	if p.softDelete == "" {
		return "TRUE"
	}
	return ref(side, p.softDelete) + " IS NULL"
}

// onInsert writes a .created event per inserted row that is live: a row
// inserted soft deleted (a partitioned table's row moved to another
// partition with its soft delete, which PostgreSQL does by a delete and
// an insert) starts nothing.
func (p *plan) onInsert(src sources) string {
	id, ws, proj := p.envelope("n")
	return p.insert(p.eventType("n", p.spec.Verbs.Created), p.entityType(true), id, ws, proj, p.initiator("n", p.shape.creator), p.createdPayload(),
		"FROM "+src.new+" AS n WHERE "+p.only("n")+" AND "+p.live("n"))
}

// onDelete writes a .deleted event per deleted row, carrying the old row;
// a row that was already soft deleted had its event then, and a row whose
// Parent is gone (a cascade from the parent's DELETE) ended with it.
func (p *plan) onDelete(src sources) string {
	id, ws, proj := p.envelope("o")
	from := "FROM " + src.old + " AS o\n\t\tWHERE " + p.only("o") + " AND " + p.live("o")
	if p.shape.parent != nil {
		from += " AND " + p.parentExists("o")
	}
	return p.insert(p.eventType("o", p.spec.Verbs.Deleted), p.entityType(false), id, ws, proj, p.initiator("o", p.shape.modifier), p.deletedPayload(), from)
}

// onUpdate pairs each old row with its new version by the primary key
// and writes an event for each pair that changed a tracked column or was
// soft deleted. A row whose key the update changed has no partner: it is
// the entity's end (.deleted, with its old values) and a new entity's
// start (.created).
func (p *plan) onUpdate(src sources) string {
	on := p.samePair("o", "n")
	k := p.key[0] // NOT NULL in both versions, so NULL means "no partner"
	oldGone, newGone := ref("o", k)+" IS NULL", ref("n", k)+" IS NULL"
	softDeleted, wasLive, starts := "", "", oldGone
	if p.softDelete != "" {
		// The new half of a key change starts an entity only when it is
		// live: a row soft deleted (or moved to another entity) with
		// its soft delete ends where it was, and starts nothing.
		starts = "(" + oldGone + " AND " + ref("n", p.softDelete) + " IS NULL)"
		// Both versions present: the new half of a key change has an
		// all-NULL old side, which is no soft delete.
		softDeleted = "NOT (" + oldGone + " OR " + newGone + ") AND " + ref("o", p.softDelete) + " IS NULL AND " + ref("n", p.softDelete) + " IS NOT NULL"
		// The old half of a key change ends the entity, unless a soft
		// delete ended it already, as a DELETE of it would.
		wasLive = " AND " + ref("o", p.softDelete) + " IS NULL"
	}

	eventType := "CASE WHEN " + oldGone + " THEN " + p.eventType("n", p.spec.Verbs.Created) + "\n\t\t\tWHEN " + newGone + " THEN " + p.eventType("o", p.spec.Verbs.Deleted)
	if softDeleted != "" {
		// Plane takes a soft delete's prefix from the old row.
		eventType += "\n\t\t\tWHEN " + softDeleted + " THEN " + p.eventType("o", p.spec.Verbs.Deleted)
	}
	eventType += "\n\t\t\tELSE " + p.updateType() + " END"

	either := func(o, n string) string {
		return "CASE WHEN " + newGone + " THEN " + o + "\n\t\t\t\tELSE " + n + " END"
	}
	oid, ows, oproj := p.envelope("o")
	nid, nws, nproj := p.envelope("n")
	// A pair without a partner is a .created or a .deleted, with the
	// payload onInsert or onDelete writes; the rest are updates.
	var data, previous string
	deleted := newGone
	if softDeleted != "" {
		deleted += " OR (" + softDeleted + ")"
	}
	changes := "d.changed"
	if p.spec.PreviousRow {
		changes = p.data("o")
	}
	if p.shape.plane {
		data = "CASE WHEN " + deleted + " THEN " + p.deletedData() + "\n\t\t\t\tELSE " + p.enriched("n") + " END"
		previous = "CASE WHEN " + oldGone + " THEN " + emptyObject + " WHEN " + deleted + " THEN " + p.data("o") + " ELSE " + changes + " END"
	} else {
		data = either(p.enriched("o"), p.enriched("n"))
		previous = "CASE WHEN " + oldGone + " OR " + newGone + " THEN NULL ELSE " + changes + " END"
	}
	initiator := "CASE WHEN " + oldGone + " THEN " + p.initiator("n", p.shape.creator) +
		" WHEN " + newGone + " THEN " + p.initiator("o", p.shape.modifier) + " ELSE " + p.initiator("n", p.shape.modifier) + " END"

	// OFFSET 0 keeps the diff a subquery computed once per pair, rather
	// than an expression the planner copies into the select list and the
	// filter.
	from := fmt.Sprintf(`FROM %s AS o
		FULL JOIN %s AS n ON %s
		CROSS JOIN LATERAL (SELECT %s AS changed OFFSET 0) AS d
		WHERE %s AND (%s OR (%s%s) OR (%s IS NOT NULL AND %s IS NOT NULL AND (d.changed <> '{}'::jsonb`,
		src.old, src.new, on, p.changed(), p.only("o", "n"), starts, newGone, wasLive, ref("o", k), ref("n", k))
	if softDeleted != "" {
		from += " OR " + softDeleted
	}
	from += ")))"
	entityType := "CASE WHEN " + oldGone + " THEN " + p.entityType(true) + " ELSE " + p.entityType(false) + " END"
	return p.insert(eventType, entityType, either(oid, nid), either(ows, nws), either(oproj, nproj), initiator, payload(data, previous), from)
}

// sameKey is true when the rows a and b have the same key: compared by
// the key's text form, which has an = in pg_catalog whatever the key's
// type (citext's is in the schema citext was installed in, which the
// pinned search_path leaves out). Distinct keys have distinct text forms
// within one statement.
func sameKey(key []string, a, b string) string {
	var same []string
	for _, k := range key {
		same = append(same, ref(a, k)+`::text COLLATE "C" = `+ref(b, k)+`::text COLLATE "C"`)
	}
	return strings.Join(same, " AND ")
}

// onUpdates are an update's inserts: its events, then with a Kind the
// conversions, which follow them as Plane's do.
func (p *plan) onUpdates(src sources) []string {
	if p.shape.kind == nil || p.shape.parent != nil {
		// A child's kind is its parent's, whose conversions are its own.
		return []string{p.onUpdate(src)}
	}
	return []string{p.onUpdate(src), p.onConvert(src)}
}

// guarded is one operation's inserts, each followed by counting what it
// wrote.
// Under Record a failure is caught, written to the capture errors table
// with the entity ids it concerned, and raised as a warning; the
// statement goes on. Under Fail nothing is caught: the error fails the
// statement, as any failed statement in the transaction would.
//
// Record does not catch what a retry would cure: a serialization failure
// or deadlock (class 40), a lock or statement timeout (55P03, 57014),
// exhausted resources (53), a connection or operator problem (08, 57).
// Recording those would lose events that the application's retry of the
// failed statement writes; re-raised, they fail the statement.
// (PL/pgSQL's OTHERS never catches 57014 query_canceled anyway.)
func (p *plan) guarded(op, ids string, inserts ...string) string {
	var counted []string
	for _, insert := range inserts {
		counted = append(counted, "\t\t"+insert+"\n\t\tGET DIAGNOSTICS step = ROW_COUNT;\n\t\twritten := written + step;")
	}
	writes := strings.Join(counted, "\n")
	if p.spec.OnFailure != Record {
		return writes
	}
	return fmt.Sprintf(`		BEGIN
%s
		-- Catching opens a subtransaction per trigger call: per statement
		-- for statement-level triggers, per row for row-level ones.
		EXCEPTION WHEN others THEN
			GET STACKED DIAGNOSTICS err_state = RETURNED_SQLSTATE, err_message = MESSAGE_TEXT, err_detail = PG_EXCEPTION_DETAIL;
			-- Retryable: fail the statement so that the application retries it.
			IF pg_catalog.left(err_state, 2) IN ('08', '40', '53', '57') OR err_state = '55P03' THEN
				RAISE;
			END IF;
			INSERT INTO %s (source_table, operation, entity_ids, sqlstate, message, detail)
			VALUES (%s, %s, ARRAY(%s), err_state, err_message, nullif(err_detail, ''));
			RAISE WARNING 'warren capture: %% on %%: events not written: %% (SQLSTATE %%); recorded in %%',
				%s, %s, err_message, err_state, %s;
		END;`,
		writes, p.errors, literal(p.name()), literal(op), ids,
		literal(op), literal(p.name()), literal(p.errorsName))
}

// ids selects the entity ids of a transition table's rows.
func (p *plan) ids(rows, alias string) string {
	return fmt.Sprintf("SELECT %s::text FROM %s AS %s", ref(alias, p.entityID), rows, alias)
}

// sql is the whole migration, and what it installs. No catalog or
// operator text reaches it but through quote and literal: the comments
// are fixed text, what the capture is about is the function's COMMENT,
// a literal, and the body's dollar quote is a tag the body does not hold.
func (p *plan) sql() (string, *objects) {
	var b strings.Builder
	source := quote(p.source.schema) + "." + quote(p.source.name)
	function := quote(p.source.schema) + "." + quote(p.source.name+functionSuffix)
	b.WriteString("-- warren outbox capture, generated from the catalog; do not edit. COMMENT ON FUNCTION says what it captures.\n")
	if p.spec.OnFailure == Record {
		fmt.Fprintf(&b, `
-- Where the trigger records the events it could not write.
CREATE TABLE IF NOT EXISTS %s (
	id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	source_table text        NOT NULL,
	operation    text        NOT NULL,
	entity_ids   text[]      NOT NULL,
	sqlstate     text        NOT NULL,
	message      text        NOT NULL,
	detail       text,
	occurred_at  timestamptz NOT NULL DEFAULT now()
);
`, p.errors)
	}
	body := p.body()
	tag := dollarTag(body)
	fmt.Fprintf(&b, `
-- One function for the table's triggers. The column lists are written
-- out: nothing is looked up in the catalog at run time.
-- jit = off: a session keeps the plan its first statement made; planned for
-- a bulk statement's transition tables it costs over jit_above_cost, and
-- every later one-row statement would pay ~60 ms of JIT compilation.
-- search_path: only pg_catalog's functions and operators are called.
-- The output settings: the events' text is the same whatever the writer's.
CREATE OR REPLACE FUNCTION %s() RETURNS trigger LANGUAGE plpgsql
	%s
	AS %s%s%s;
COMMENT ON FUNCTION %s() IS %s;
`, function, functionSettings, tag, body, tag, function, literal(p.description()))

	triggers := p.triggers()
	if p.rowLevel {
		b.WriteString("\n-- Row-level: PostgreSQL clones these to every partition, present and future, and\n" +
			"-- they fire for statements naming a partition, the parent, or an inheritance parent.\n")
	} else {
		b.WriteString("\n-- Statement-level: a statement touching 10,000 rows writes its events in\n" +
			"-- one INSERT … SELECT from its transition tables. Logical replication's\n" +
			"-- apply worker fires row-level triggers only: the replica ones are for it.\n")
	}
	for _, t := range []string{triggerInsert, triggerUpdate, triggerDelete, triggerReplicaInsert, triggerReplicaUpdate, triggerReplicaDelete, triggerGuard, triggerTruncate} {
		fmt.Fprintf(&b, "DROP TRIGGER IF EXISTS %s ON %s;\n", t, source)
	}
	for _, t := range triggers {
		if t.event != "TRUNCATE" {
			b.WriteString(t.create(source, function))
		}
	}
	b.WriteString(`
-- TRUNCATE would remove rows without their events: it is refused. Not
-- cloned to partitions, so each present partition gets its own.
`)
	truncate := triggers[len(triggers)-1]
	for _, rel := range append([]string{source}, p.source.partitions...) {
		if rel != source {
			fmt.Fprintf(&b, "DROP TRIGGER IF EXISTS %s ON %s;\n", triggerTruncate, rel)
		}
		b.WriteString(truncate.create(rel, function))
	}
	b.WriteString(`
-- ALWAYS: they fire under session_replication_role = replica too (bulk
-- loaders, restores, logical replication's workers); see the function for
-- what a replication worker's writes do. On a partitioned table this
-- reaches the clones, present and future.
`)
	for _, t := range triggers {
		fmt.Fprintf(&b, "ALTER TABLE %s ENABLE %s TRIGGER %s;\n", source, t.enable(), t.name)
	}
	for _, rel := range p.source.partitions {
		fmt.Fprintf(&b, "ALTER TABLE %s ENABLE %s TRIGGER %s;\n", rel, truncate.enable(), truncate.name)
	}
	o := &objects{source: source, outbox: p.outbox, partitions: p.source.partitions, function: function + "()", body: body, triggers: triggers}
	if p.spec.OnFailure == Record {
		o.errors = p.errors
	}
	return b.String(), o
}

// triggers are the capture's triggers on the table, the TRUNCATE one last.
func (p *plan) triggers() []trigger {
	ts := []trigger{{triggerInsert, "INSERT", p.rowLevel, false, false}, {triggerUpdate, "UPDATE", p.rowLevel, false, false},
		{triggerDelete, "DELETE", p.rowLevel, false, false}}
	if !p.rowLevel {
		ts = append(ts, trigger{triggerReplicaInsert, "INSERT", true, true, false}, trigger{triggerReplicaUpdate, "UPDATE", true, true, false},
			trigger{triggerReplicaDelete, "DELETE", true, true, false}, trigger{triggerGuard, "INSERT", true, false, true})
	}
	return append(ts, trigger{triggerTruncate, "TRUNCATE", false, false, false})
}

// create is the trigger's CREATE TRIGGER on rel.
func (t trigger) create(rel, function string) string {
	if t.event == "TRUNCATE" {
		return fmt.Sprintf("CREATE TRIGGER %s BEFORE TRUNCATE ON %s FOR EACH STATEMENT EXECUTE FUNCTION %s();\n", t.name, rel, function)
	}
	level, transition, when := "STATEMENT", "", ""
	if t.row {
		level = "ROW"
	}
	if oldTable, newTable := t.transition(); oldTable != "" || newTable != "" {
		transition = " REFERENCING"
		if oldTable != "" {
			transition += " OLD TABLE AS " + oldTable
		}
		if newTable != "" {
			transition += " NEW TABLE AS " + newTable
		}
	}
	if t.guard {
		when = " WHEN (false)"
	}
	return fmt.Sprintf("CREATE TRIGGER %s AFTER %s ON %s%s\n\tFOR EACH %s%s EXECUTE FUNCTION %s();\n", t.name, t.event, rel, transition, level, when, function)
}

// transition names the trigger's transition tables, "" for none.
func (t trigger) transition() (oldTable, newTable string) {
	switch {
	case t.guard:
		return "", guardRows
	case t.row:
		return "", ""
	case t.event == "INSERT":
		return "", newRows
	case t.event == "UPDATE":
		return oldRows, newRows
	case t.event == "DELETE":
		return oldRows, ""
	}
	return "", ""
}

// tgtype is pg_trigger.tgtype of the trigger: its level, timing and
// event bits (TRIGGER_TYPE_ROW 1, BEFORE 2, INSERT 4, DELETE 8, UPDATE
// 16, TRUNCATE 32).
func (t trigger) tgtype() int {
	bits := map[string]int{"INSERT": 4, "DELETE": 8, "UPDATE": 16, "TRUNCATE": 32 | 2}[t.event]
	if t.row {
		bits |= 1
	}
	return bits
}

func (t trigger) enable() string {
	if t.replicaOnly {
		return "REPLICA"
	}
	return "ALWAYS"
}

// body is the trigger function's body.
func (p *plan) body() string {
	declare := "\twritten bigint := 0;\n\tstep bigint;\n\tsubscription text;\n"
	if p.spec.OnFailure == Record {
		declare += "\terr_state text;\n\terr_message text;\n\terr_detail text;\n"
	}
	dispatch := p.ops(rowRows)
	if !p.rowLevel {
		dispatch = "\tIF TG_LEVEL = 'ROW' THEN\n" + p.ops(rowRows) + "\n\tELSE\n" + p.ops(statementRows) + "\n\tEND IF;"
	}
	return fmt.Sprintf(`
DECLARE
%sBEGIN
%s
	IF TG_OP = 'TRUNCATE' THEN
		RAISE EXCEPTION 'warren capture: TRUNCATE of %% would remove its rows without their events', %s
			USING ERRCODE = 'feature_not_supported',
				HINT = 'DELETE the rows (which writes their events), or uninstall the capture first (warren outbox capture --uninstall) to remove them without events.';
	END IF;
%s
	-- Wakes the relay when the transaction commits, as outbox.Publish does.
	IF written > 0 THEN
		PERFORM pg_catalog.pg_notify(%s, '');
	END IF;
	RETURN NULL;
END
`, declare, p.replica(), literal(p.name()), dispatch, literal(p.channel))
}

// ops writes the events of one trigger call, reading its rows from src.
func (p *plan) ops(src sources) string {
	if p.shape.link != nil {
		return p.linkOps(src)
	}
	return fmt.Sprintf(`	IF TG_OP = 'INSERT' THEN
%s
	ELSIF TG_OP = 'UPDATE' THEN
%s
	ELSIF TG_OP = 'DELETE' THEN
%s
	END IF;`,
		p.guarded("INSERT", p.ids(src.new, "n"), p.onInsert(src)),
		p.guarded("UPDATE", p.ids(src.new, "n")+" UNION "+p.ids(src.old, "o"), p.onUpdates(src)...),
		p.guarded("DELETE", p.ids(src.old, "o"), p.onDelete(src)))
}

// replica is what the function does first in a session under
// session_replication_role = replica. A logical replication worker is
// such a session listed, by its pid, in pg_stat_subscription, which no
// other session can be: there Spec.Subscriber decides. The worker that
// applies changes fires row-level triggers only, and a table sync's COPY
// fires both kinds, so for a statement-level capture its row-level
// (replica) triggers write in a worker and its statement-level ones
// everywhere else. See docs/adr/024-capture-replication-role.md.
func (p *plan) replica() string {
	if p.rowLevel && p.spec.Subscriber == SubscriberCapture {
		return "\t-- Subscriber: capture. Every session's writes write their events."
	}
	var action string
	switch p.spec.Subscriber {
	case SubscriberCapture:
		action = "\t\t\t-- Subscriber: capture. A logical replication worker's writes write their events."
	case SubscriberSkip:
		action = "\t\t\t-- Subscriber: skip. The publisher captures this table: its outbox has the events.\n\t\t\tRETURN NULL;"
	default:
		action = fmt.Sprintf(`			RAISE EXCEPTION 'warren capture: logical replication (subscription %%) writes %%, and the capture was installed with no choice of whether this end writes those events', subscription, %s
				USING ERRCODE = 'object_not_in_prerequisite_state',
					HINT = 'Install the capture again with Subscriber capture (this end writes the events) or skip (the publisher captures this table and writes them): warren outbox capture --subscriber capture|skip.';`,
			literal(p.name()))
	}
	levels := ""
	if !p.rowLevel {
		action += "\n\t\t\tIF TG_LEVEL = 'STATEMENT' AND TG_OP <> 'TRUNCATE' THEN\n\t\t\t\tRETURN NULL; -- the row-level calls write\n\t\t\tEND IF;"
		levels = "\n\t\tELSIF TG_LEVEL = 'ROW' THEN\n\t\t\tRETURN NULL; -- the statement-level call writes"
	}
	return fmt.Sprintf(`	IF pg_catalog.current_setting('session_replication_role') = 'replica' THEN
		SELECT s.subname INTO subscription FROM pg_catalog.pg_stat_subscription AS s WHERE s.pid = pg_catalog.pg_backend_pid() LIMIT 1;
		IF FOUND THEN
%s%s
		END IF;
	END IF;`, action, levels)
}

// descriptionOutbox is the outbox a description names.
func descriptionOutbox(description, name string) string {
	rest, ok := strings.CutPrefix(description, "warren outbox capture: "+name+" -> ")
	outbox, _, found := strings.Cut(rest, " (")
	if !ok || !found {
		return ""
	}
	return outbox
}

// description is the function's COMMENT: what the capture is about.
func (p *plan) description() string {
	tracked := make([]string, len(p.tracked))
	for i, c := range p.tracked {
		tracked[i] = c.name
	}
	level := "statement"
	if p.rowLevel {
		level = "row"
	}
	v := p.spec.Verbs
	d := fmt.Sprintf("warren outbox capture: %s -> %s (%s.%s, .%s, .%s); tracked columns: %s; on failure: %s; subscriber: %s; %s-level triggers",
		p.name(), p.outbox, p.spec.EventPrefix, v.Created, v.Updated, v.Deleted, strings.Join(tracked, ", "), p.spec.OnFailure, p.spec.Subscriber, level)
	if p.shape.plane {
		d += "; shape: plane"
	}
	if l := p.shape.link; l != nil {
		// Its own .created, .updated and .deleted it never writes.
		return fmt.Sprintf("warren outbox capture: %s -> %s (links of %s: %s.%s, .%s); on failure: %s; subscriber: %s; %s-level triggers",
			p.name(), p.outbox, p.shape.parent.table, p.spec.EventPrefix, l.Added, l.Removed, p.spec.OnFailure, p.spec.Subscriber, level)
	}
	if len(p.shape.ignore) > 0 {
		d += "; ignored: " + strings.Join(p.shape.ignore, ", ")
	}
	return d
}

// dollarTag is a dollar quote that body does not contain, so that
// nothing in it (a column name, an event prefix) ends the body early.
func dollarTag(body string) string {
	tag := "$warren_capture$"
	for i := 1; strings.Contains(body, tag); i++ {
		tag = fmt.Sprintf("$warren_capture_%d$", i)
	}
	return tag
}
