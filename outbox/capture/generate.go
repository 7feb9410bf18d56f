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
	source   string // the captured table, quoted
	function string // the function's signature, quoted: "public"."issues_warren_capture"()
	body     string // the function's body, as pg_proc.prosrc holds it
}

// The names the generated objects use.
const (
	triggerInsert = "warren_capture_insert"
	triggerUpdate = "warren_capture_update"
	triggerDelete = "warren_capture_delete"
	newRows       = "warren_new_rows" // the statement's transition tables
	oldRows       = "warren_old_rows"
	bodyTag       = "$warren_capture$" // the function body's dollar quote
)

// maxBuildPairs is how many key-value pairs one jsonb_build_object call
// takes: Postgres functions take at most 100 arguments.
const maxBuildPairs = 50

// plan is a Spec resolved against the catalog: everything the SQL needs.
type plan struct {
	spec       Spec
	source     *table
	tracked    []column
	key        []string // primary key, pairs old and new rows
	entityID   string
	softDelete string // "" when off
	outbox     string // quoted, schema-qualified
	errors     string // quoted, schema-qualified capture errors table
	errorsName string // the same, unquoted, for messages
	channel    string
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
	p := &plan{
		spec: spec, source: src, channel: ob.Channel(),
		outbox: quote(outboxSchema) + "." + quote(ob.Name()),
		errors: quote(outboxSchema) + "." + quote(ob.CaptureErrorsTable()),

		errorsName: outboxSchema + "." + ob.CaptureErrorsTable(),
	}
	if err := p.resolveColumns(); err != nil {
		return nil, err
	}
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
	if len(p.key) == 0 {
		return invalidf("table %s has no primary key; the update trigger pairs each row's old and new versions by it", p.name())
	}
	p.entityID = spec.EntityIDColumn
	switch {
	case p.entityID != "":
		if err := need("EntityIDColumn", p.entityID); err != nil {
			return err
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
		p.softDelete = spec.SoftDeleteColumn
	default:
		if _, ok := t.column(DefaultSoftDeleteColumn); ok {
			p.softDelete = DefaultSoftDeleteColumn
		}
	}
	// Every column name reaches the SQL quoted, and as a JSON key in a
	// string literal; a backslash would mean different things there
	// depending on standard_conforming_strings, and the dollar quote would
	// end the function body early.
	for _, c := range t.columns {
		if strings.ContainsRune(c.name, '\\') || strings.Contains(c.name, bodyTag) {
			return invalidf("column %q of %s: capture cannot quote a name with a backslash or %s", c.name, p.name(), bodyTag)
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
		parts = append(parts, "jsonb_build_object("+strings.Join(args, ", ")+")")
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
	for _, c := range p.tracked {
		// COLLATE "C": a text column's collation survives the cast, and a
		// case-insensitive one would call 'A' and 'a' equal again.
		o, n := ref("o", c.name)+`::text COLLATE "C"`, ref("n", c.name)+`::text COLLATE "C"`
		parts = append(parts, fmt.Sprintf("CASE WHEN %s IS DISTINCT FROM %s THEN jsonb_build_object(%s, %s) ELSE '{}'::jsonb END",
			o, n, literal(c.name), ref("o", c.name)))
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

// insert is the INSERT … SELECT that writes one event per selected row.
func (p *plan) insert(eventType, entityID, workspace, project, payload, from string) string {
	version := "NULL"
	if p.spec.Version != "" {
		version = literal(p.spec.Version)
	}
	return fmt.Sprintf(`INSERT INTO %s (%s)
		SELECT gen_random_uuid()::text,
			%s,
			%s,
			%s,
			%s,
			%s,
			nullif(current_setting(%s, true), ''),
			coalesce(nullif(current_setting(%s, true), ''), %s),
			%s,
			%s
		%s;`,
		p.outbox, insertColumns, eventType, literal(p.spec.EntityType), entityID, workspace, project,
		literal(p.spec.InitiatorIDSetting), literal(p.spec.InitiatorTypeSetting), literal(DefaultInitiatorType),
		payload, version, from)
}

func (p *plan) eventType(verb string) string { return literal(p.spec.EventPrefix + "." + verb) }

// onInsert writes a .created event per inserted row.
func (p *plan) onInsert() string {
	id, ws, proj := p.envelope("n")
	payload := "jsonb_build_object('data', " + p.data("n") + ",\n\t\t\t'previous_attributes', NULL)"
	return p.insert(p.eventType("created"), id, ws, proj, payload, "FROM "+newRows+" AS n")
}

// onDelete writes a .deleted event per deleted row, carrying the old row;
// a row that was already soft deleted had its event then.
func (p *plan) onDelete() string {
	id, ws, proj := p.envelope("o")
	payload := "jsonb_build_object('data', " + p.data("o") + ",\n\t\t\t'previous_attributes', NULL)"
	from := "FROM " + oldRows + " AS o"
	if p.softDelete != "" {
		from += "\n\t\tWHERE " + ref("o", p.softDelete) + " IS NULL"
	}
	return p.insert(p.eventType("deleted"), id, ws, proj, payload, from)
}

// onUpdate pairs each old row with its new version by the primary key
// and writes an event for each pair that changed a tracked column or was
// soft deleted. A row whose key the update changed has no partner: it is
// the entity's end (.deleted, with its old values) and a new entity's
// start (.created).
func (p *plan) onUpdate() string {
	var on []string
	for _, k := range p.key {
		on = append(on, ref("o", k)+" = "+ref("n", k))
	}
	k := p.key[0] // NOT NULL in both versions, so NULL means "no partner"
	oldGone, newGone := ref("o", k)+" IS NULL", ref("n", k)+" IS NULL"
	softDeleted := ""
	if p.softDelete != "" {
		softDeleted = ref("o", p.softDelete) + " IS NULL AND " + ref("n", p.softDelete) + " IS NOT NULL"
	}

	eventType := "CASE WHEN " + oldGone + " THEN " + p.eventType("created") + "\n\t\t\tWHEN " + newGone + " THEN " + p.eventType("deleted")
	if softDeleted != "" {
		eventType += "\n\t\t\tWHEN " + softDeleted + " THEN " + p.eventType("deleted")
	}
	eventType += "\n\t\t\tELSE " + p.eventType("updated") + " END"

	either := func(o, n string) string {
		return "CASE WHEN " + newGone + " THEN " + o + "\n\t\t\t\tELSE " + n + " END"
	}
	oid, ows, oproj := p.envelope("o")
	nid, nws, nproj := p.envelope("n")
	payload := "jsonb_build_object('data', " + either(p.data("o"), p.data("n")) +
		",\n\t\t\t'previous_attributes', CASE WHEN " + oldGone + " OR " + newGone + " THEN NULL ELSE d.changed END)"

	// OFFSET 0 keeps the diff a subquery computed once per pair, rather
	// than an expression the planner copies into the select list and the
	// filter.
	from := fmt.Sprintf(`FROM %s AS o
		FULL JOIN %s AS n ON %s
		CROSS JOIN LATERAL (SELECT %s AS changed OFFSET 0) AS d
		WHERE %s OR %s OR d.changed <> '{}'::jsonb`,
		oldRows, newRows, strings.Join(on, " AND "), p.changed(), oldGone, newGone)
	if softDeleted != "" {
		from += " OR (" + softDeleted + ")"
	}
	return p.insert(eventType, either(oid, nid), either(ows, nws), either(oproj, nproj), payload, from)
}

// guarded is one operation's insert, followed by counting what it wrote.
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
func (p *plan) guarded(op, insert, ids string) string {
	if p.spec.OnFailure != Record {
		return "\t\t" + insert + "\n\t\tGET DIAGNOSTICS written = ROW_COUNT;"
	}
	return fmt.Sprintf(`		BEGIN
		%s
		GET DIAGNOSTICS written = ROW_COUNT;
		-- Catching opens a subtransaction per statement, not per row.
		EXCEPTION WHEN others THEN
			GET STACKED DIAGNOSTICS err_state = RETURNED_SQLSTATE, err_message = MESSAGE_TEXT, err_detail = PG_EXCEPTION_DETAIL;
			-- Retryable: fail the statement so that the application retries it.
			IF left(err_state, 2) IN ('08', '40', '53', '57') OR err_state = '55P03' THEN
				RAISE;
			END IF;
			INSERT INTO %s (source_table, operation, entity_ids, sqlstate, message, detail)
			VALUES (%s, %s, ARRAY(%s), err_state, err_message, nullif(err_detail, ''));
			RAISE WARNING 'warren capture: %% on %%: events not written: %% (SQLSTATE %%); recorded in %%',
				%s, %s, err_message, err_state, %s;
		END;`,
		insert, p.errors, literal(p.name()), literal(op), ids,
		literal(op), literal(p.name()), literal(p.errorsName))
}

// ids selects the entity ids of a transition table's rows.
func (p *plan) ids(rows, alias string) string {
	return fmt.Sprintf("SELECT %s::text FROM %s AS %s", ref(alias, p.entityID), rows, alias)
}

// sql is the whole migration, and what it installs.
func (p *plan) sql() (string, *objects) {
	var b strings.Builder
	source := quote(p.source.schema) + "." + quote(p.source.name)
	function := quote(p.source.schema) + "." + quote(p.source.name+functionSuffix)
	tracked := make([]string, len(p.tracked))
	for i, c := range p.tracked {
		tracked[i] = c.name
	}
	fmt.Fprintf(&b, "-- warren outbox capture: %s → %s (%s.created, .updated, .deleted), generated from the catalog; do not edit.\n",
		p.name(), p.outbox, p.spec.EventPrefix)
	fmt.Fprintf(&b, "-- tracked columns: %s\n", strings.Join(tracked, ", "))
	fmt.Fprintf(&b, "-- on failure: %s\n", p.spec.OnFailure)
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
	declare := "\twritten bigint := 0;\n"
	if p.spec.OnFailure == Record {
		declare += "\terr_state text;\n\terr_message text;\n\terr_detail text;\n"
	}
	body := fmt.Sprintf(`
DECLARE
%sBEGIN
	IF TG_OP = 'INSERT' THEN
%s
	ELSIF TG_OP = 'UPDATE' THEN
%s
	ELSIF TG_OP = 'DELETE' THEN
%s
	END IF;
	-- Wakes the relay when the transaction commits, as outbox.Publish does.
	IF written > 0 THEN
		PERFORM pg_notify(%s, '');
	END IF;
	RETURN NULL;
END
`, declare,
		p.guarded("INSERT", p.onInsert(), p.ids(newRows, "n")),
		p.guarded("UPDATE", p.onUpdate(), p.ids(newRows, "n")+" UNION "+p.ids(oldRows, "o")),
		p.guarded("DELETE", p.onDelete(), p.ids(oldRows, "o")),
		literal(p.channel))
	fmt.Fprintf(&b, `
-- One function for the table's three statement-level triggers. The column
-- lists are written out: nothing is looked up in the catalog at run time.
-- jit = off: a session keeps the plan its first statement made; planned for
-- a bulk statement's transition tables it costs over jit_above_cost, and
-- every later one-row statement would pay ~60 ms of JIT compilation.
CREATE OR REPLACE FUNCTION %s() RETURNS trigger LANGUAGE plpgsql SET jit = off AS %s%s%s;
`, function, bodyTag, body, bodyTag)
	fmt.Fprintf(&b, `
-- Statement-level: a statement touching 10,000 rows writes its events in
-- one INSERT … SELECT from its transition tables.
DROP TRIGGER IF EXISTS %[1]s ON %[4]s;
DROP TRIGGER IF EXISTS %[2]s ON %[4]s;
DROP TRIGGER IF EXISTS %[3]s ON %[4]s;
CREATE TRIGGER %[1]s AFTER INSERT ON %[4]s REFERENCING NEW TABLE AS %[6]s
	FOR EACH STATEMENT EXECUTE FUNCTION %[5]s();
CREATE TRIGGER %[2]s AFTER UPDATE ON %[4]s REFERENCING OLD TABLE AS %[7]s NEW TABLE AS %[6]s
	FOR EACH STATEMENT EXECUTE FUNCTION %[5]s();
CREATE TRIGGER %[3]s AFTER DELETE ON %[4]s REFERENCING OLD TABLE AS %[7]s
	FOR EACH STATEMENT EXECUTE FUNCTION %[5]s();
`, triggerInsert, triggerUpdate, triggerDelete, source, function, newRows, oldRows)
	return b.String(), &objects{source: source, function: function + "()", body: body}
}
