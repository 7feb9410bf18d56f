package capture

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/warrenmq/warren/outbox"
)

// shaping is the Spec's shaping options resolved against the catalog:
// every name checked to exist, every table quoted with its schema.
type shaping struct {
	ignore   []string // tracked columns whose change writes no event
	verbs    []ColumnVerb
	creator  string // columns initiator_id comes from, "" for the setting
	modifier string
	enrich   []enrichment
	kind     *kindLookup
	parent   *parentRow
	link     *linkParent
	plane    bool // ShapePlane
}

// enrichment is an Enrichment with its table quoted.
type enrichment struct {
	Enrichment
	table string
}

// kindLookup is a KindPrefix with its table quoted.
type kindLookup struct {
	KindPrefix
	table string
}

// resolveShaping checks the shaping options' columns and tables in the
// catalog. A name reaches the SQL only quoted, and only once the catalog
// has it; a type the trigger's comparisons could not use is refused here,
// not at the first write of the table.
func (p *plan) resolveShaping(ctx context.Context, db outbox.DB) error {
	spec, t := p.spec, p.source
	s := &p.shape
	s.plane = spec.Shape == ShapePlane
	isTracked := func(name string) bool {
		return slices.ContainsFunc(p.tracked, func(c column) bool { return c.name == name })
	}
	for _, name := range spec.Ignore {
		if !isTracked(name) {
			return invalidf("Ignore: %q is not a tracked column of %s", name, p.name())
		}
		if slices.Contains(s.ignore, name) {
			return invalidf("Ignore names %q twice", name)
		}
		s.ignore = append(s.ignore, name)
	}
	if len(p.compared()) == 0 {
		return invalidf("Ignore leaves no tracked column of %s whose change writes an event", p.name())
	}
	for _, v := range spec.UpdateVerbs {
		if !isTracked(v.Column) || slices.Contains(s.ignore, v.Column) {
			return invalidf("UpdateVerbs: %q is not a tracked column of %s whose change writes an event", v.Column, p.name())
		}
	}
	s.verbs = spec.UpdateVerbs
	for what, name := range map[string]string{"CreatorColumn": spec.CreatorColumn, "ModifierColumn": spec.ModifierColumn} {
		if _, ok := t.column(name); name != "" && !ok {
			return invalidf("%s: table %s has no column %q", what, p.name(), name)
		}
	}
	s.creator, s.modifier = spec.CreatorColumn, spec.ModifierColumn
	id, _ := t.column(p.entityID)
	for _, e := range spec.Enrich {
		if isTracked(e.Key) {
			return invalidf("Enrich: key %q is a tracked column's name, whose value it would hide", e.Key)
		}
		linked, err := readLinked(ctx, db, e.Table)
		if err != nil {
			return fmt.Errorf("capture: Enrich %q: %w", e.Key, err)
		}
		if err := linked.need("Enrich "+e.Key, e.LinkColumn, e.ValueColumn, e.OrderColumn, e.LiveColumn); err != nil {
			return err
		}
		if link, _ := linked.column(e.LinkColumn); link.typ != id.typ {
			return invalidf("Enrich %q: %s.%s is %s and the entity id %s is %s; the lookup compares them with =",
				e.Key, linked.name, e.LinkColumn, link.typ, p.entityID, id.typ)
		}
		if live, _ := linked.column(e.LiveColumn); e.LiveColumn != "" && live.notNull {
			return invalidf("Enrich %q: LiveColumn %q is NOT NULL, so no row would count as live", e.Key, e.LiveColumn)
		}
		if err := linked.comparable(ctx, db, "Enrich "+e.Key, e.LinkColumn, e.OrderColumn); err != nil {
			return err
		}
		s.enrich = append(s.enrich, enrichment{e, quote(linked.schema) + "." + quote(linked.name)})
	}
	if err := p.resolveOnly(ctx, db); err != nil {
		return err
	}
	if err := p.resolveParent(ctx, db); err != nil {
		return err
	}
	if err := p.resolveLink(); err != nil {
		return err
	}
	if k := spec.Kind; k != nil {
		own, _ := t.column(k.Column)
		switch {
		case s.parent != nil:
			// A child's kind is its parent's; it writes no conversions.
			var ok bool
			if own, ok = s.parent.t.column(k.Column); !ok {
				return invalidf("Kind: the parent table %s has no column %q", s.parent.t.name, k.Column)
			}
		case !slices.ContainsFunc(p.compared(), func(c column) bool { return c.name == k.Column }):
			// A conversion follows the event its change writes, as Plane's do.
			return invalidf("Kind: %q is not a tracked column of %s whose change writes an event", k.Column, p.name())
		}
		linked, err := readLinked(ctx, db, k.Table)
		if err != nil {
			return fmt.Errorf("capture: Kind: %w", err)
		}
		if err := linked.need("Kind", k.KeyColumn, k.FlagColumn); err != nil {
			return err
		}
		if key, _ := linked.column(k.KeyColumn); key.typ != own.typ {
			return invalidf("Kind: %s.%s is %s and %s is %s; the lookup compares them with =", linked.name, k.KeyColumn, key.typ, k.Column, own.typ)
		}
		if flag, _ := linked.column(k.FlagColumn); flag.typ != "boolean" {
			return invalidf("Kind: FlagColumn %s.%s is %s, not boolean", linked.name, k.FlagColumn, flag.typ)
		}
		if err := linked.comparable(ctx, db, "Kind", k.KeyColumn, ""); err != nil {
			return err
		}
		s.kind = &kindLookup{*k, quote(linked.schema) + "." + quote(linked.name)}
	}
	return nil
}

// resolveOnly checks Spec.Only: the column exists, and Value is a text
// form the column can have under the trigger's settings (UTC, ISO dates,
// hex bytea), so that the filter can match at all: the check runs under
// those settings, in a transaction of its own that it rolls back.
func (p *plan) resolveOnly(ctx context.Context, db outbox.DB) error {
	o := p.spec.Only
	if o == nil {
		return nil
	}
	if _, ok := p.source.column(o.Column); !ok {
		return invalidf("Only: table %s has no column %q", p.name(), o.Column)
	}
	var typ string
	err := db.QueryRow(ctx, `
		SELECT pg_catalog.format_type(a.atttypid, a.atttypmod) FROM pg_attribute a
		WHERE a.attrelid = $1::regclass AND a.attname = $2`,
		quote(p.source.schema)+"."+quote(p.source.name), o.Column).Scan(&typ)
	if err != nil {
		return fmt.Errorf("capture: Only: read the type of %s.%s: %w", p.name(), o.Column, err)
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("capture: Only: %w", err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, outputSettings()); err != nil {
		return fmt.Errorf("capture: Only: %w", err)
	}
	// format_type quotes what needs quoting; the type came from the
	// catalog, the value goes as a parameter.
	var stored string
	if err := tx.QueryRow(ctx, "SELECT CAST(CAST($1 AS text) AS "+typ+")::text", o.Value).Scan(&stored); err != nil {
		return invalidf("Only: %q is no value of %s.%s (%s): %v", o.Value, p.name(), o.Column, typ, err)
	}
	if stored != o.Value {
		return invalidf("Only: %s.%s (%s) stores %q as %q, and the trigger compares text forms: write %q", p.name(), o.Column, typ, o.Value, stored, stored)
	}
	return nil
}

// need refuses a non-empty name the table does not have.
func (t *table) need(what string, names ...string) error {
	for _, n := range names {
		if _, ok := t.column(n); n != "" && !ok {
			return invalidf("%s: table %s.%s has no column %q", what, t.schema, t.name, n)
		}
	}
	return nil
}

// comparable refuses a lookup the trigger could not run or would run
// otherwise than the type's users expect. The function's search_path is
// pg_catalog: a type whose = is elsewhere (citext's, case-insensitive;
// an extension's) would be compared by pg_catalog's, through a cast, or
// not at all. And the lookup, its ORDER BY included, is planned here, so
// that a column without an ordering (json, point) fails the generation,
// not every write of the captured table.
func (t *table) comparable(ctx context.Context, db outbox.DB, what, column, order string) error {
	rel := quote(t.schema) + "." + quote(t.name)
	var schema string
	// The column's type and, for a domain, the types below it: a domain
	// over citext compares by citext's =.
	err := db.QueryRow(ctx, `
		WITH RECURSIVE types(oid) AS (
			SELECT a.atttypid FROM pg_attribute a WHERE a.attrelid = $1::regclass AND a.attname = $2
			UNION
			SELECT t.typbasetype FROM types JOIN pg_type t ON t.oid = types.oid WHERE t.typtype = 'd'
		)
		SELECT n.nspname FROM pg_operator o
		JOIN pg_namespace n ON n.oid = o.oprnamespace
		JOIN types ON o.oprleft = types.oid AND o.oprright = types.oid
		WHERE o.oprname = '=' AND n.nspname <> 'pg_catalog'
		LIMIT 1`, rel, column).Scan(&schema)
	switch {
	case err == nil:
		return invalidf("%s: %s.%s's type has its = in schema %s; the trigger calls pg_catalog's only, which would compare it otherwise", what, t.name, column, schema)
	case !errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("capture: %s: read the operators of %s.%s: %w", what, t.name, column, err)
	}
	probe := fmt.Sprintf("SELECT 1 FROM %s AS warren_e WHERE warren_e.%s OPERATOR(pg_catalog.=) warren_e.%[2]s", rel, quote(column))
	if order != "" {
		probe += " ORDER BY warren_e." + quote(order)
	}
	if _, err := db.Exec(ctx, probe+" LIMIT 0"); err != nil {
		return invalidf("%s: the lookup in %s.%s cannot run: %v", what, t.schema, t.name, err)
	}
	return nil
}

// compared are the tracked columns whose change writes an event.
func (p *plan) compared() []column {
	return slices.DeleteFunc(slices.Clone(p.tracked), func(c column) bool { return slices.Contains(p.shape.ignore, c.name) })
}

// isKind is true when the row on side is of the Kind.
func (p *plan) isKind(side string) string {
	k := p.shape.kind
	return fmt.Sprintf("EXISTS (SELECT 1 FROM %s AS warren_k WHERE warren_k.%s = %s AND warren_k.%s IS TRUE)",
		k.table, quote(k.KeyColumn), p.kindColumn(side), quote(k.FlagColumn))
}

// kindColumn is the Kind column of the row on side, or, with a Parent, of
// its parent.
func (p *plan) kindColumn(side string) string {
	if l := p.shape.parent; l != nil {
		return fmt.Sprintf("(SELECT warren_p.%s FROM %s AS warren_p WHERE warren_p.%s = %s)",
			quote(p.shape.kind.Column), l.table, quote(l.KeyColumn), ref(side, p.entityID))
	}
	return ref(side, p.shape.kind.Column)
}

// kindOf is whether the row on side is of the Kind for a conversion: false
// without a lookup value, the flag of the row it finds, and NULL when it
// finds none (a dangling or cascaded key), which writes no conversion, as
// Plane's lookup into a variable finds NULL and writes none.
func (p *plan) kindOf(side string) string {
	k := p.shape.kind
	return fmt.Sprintf("CASE WHEN %s IS NULL THEN false ELSE (SELECT coalesce(warren_k.%s, false) FROM %s AS warren_k WHERE warren_k.%s = %[1]s LIMIT 1) END",
		ref(side, k.Column), quote(k.FlagColumn), k.table, quote(k.KeyColumn))
}

// eventType is the event type of verb for the row on side: with a Kind,
// its prefix depends on the row.
func (p *plan) eventType(side, verb string) string {
	if p.shape.kind == nil {
		return literal(p.spec.EventPrefix + "." + verb)
	}
	return "CASE WHEN " + p.isKind(side) + " THEN " + literal(p.shape.kind.Prefix+"."+verb) +
		" ELSE " + literal(p.spec.EventPrefix+"."+verb) + " END"
}

// updateType is the event type of an update of the pair that changed
// what d.changed holds: the first UpdateVerbs column it changed names it.
func (p *plan) updateType() string {
	if len(p.shape.verbs) == 0 {
		return p.eventType("n", p.spec.Verbs.Updated)
	}
	t := "CASE"
	for _, v := range p.shape.verbs {
		t += " WHEN d.changed ? " + literal(v.Column) + " THEN " + p.eventType("n", v.Verb)
	}
	return t + " ELSE " + p.eventType("n", p.spec.Verbs.Updated) + " END"
}

// enriched is data(side) with the Enrich arrays of the row on side; with
// Parent.As, the parent's row and arrays with data(side) under As.
func (p *plan) enriched(side string) string {
	if pr := p.shape.parent; pr != nil && pr.As != "" {
		return p.parentEnriched(side) + "\n\t\t\t|| pg_catalog.jsonb_build_object(" + literal(pr.As) + ", " + p.data(side) + ")"
	}
	if len(p.shape.enrich) == 0 {
		return p.data(side)
	}
	return p.data(side) + "\n\t\t\t|| " + p.lists(side)
}

// parentEnriched is the parent's row of the row on side, with the Enrich
// arrays.
func (p *plan) parentEnriched(side string) string {
	if len(p.shape.enrich) == 0 {
		return p.parentData(side)
	}
	return p.parentData(side) + "\n\t\t\t|| " + p.lists(side)
}

// deletedData is data of a Plane-shaped .deleted event of the old row o:
// the JSON string "{}", or with Parent.As, the parent's row and arrays
// without the row.
func (p *plan) deletedData() string {
	if pr := p.shape.parent; pr != nil && pr.As != "" {
		return p.parentEnriched("o")
	}
	return emptyObject
}

// lists is the JSON object of the Enrich arrays of the entity the row on
// side is about.
func (p *plan) lists(side string) string {
	var args []string
	for _, e := range p.shape.enrich {
		args = append(args, literal(e.Key), p.list(e, side, ""))
	}
	return "pg_catalog.jsonb_build_object(" + strings.Join(args, ", ") + ")"
}

// list is one Enrich array of the entity the row on side is about; also,
// when set, the rows that match the filter more.
func (p *plan) list(e enrichment, side, more string) string {
	order, live := "", ""
	if e.OrderColumn != "" {
		order = " ORDER BY warren_e." + quote(e.OrderColumn)
	}
	if e.LiveColumn != "" {
		live = " AND warren_e." + quote(e.LiveColumn) + " IS NULL"
	}
	return fmt.Sprintf("(SELECT coalesce(pg_catalog.jsonb_agg(warren_e.%s%s), '[]'::jsonb) FROM %s AS warren_e WHERE warren_e.%s = %s%s%s)",
		quote(e.ValueColumn), order, e.table, quote(e.LinkColumn), ref(side, p.entityID), live, more)
}

// emptyObject is Plane's "{}": a JSON string, which is what
// jsonb_build_object makes of an untyped '{}' literal.
const emptyObject = "pg_catalog.to_jsonb('{}'::text)"

// payload is the payload of a row event, data and previous_attributes
// already chosen.
func payload(data, previous string) string {
	return "pg_catalog.jsonb_build_object('data', " + data + ",\n\t\t\t'previous_attributes', " + previous + ")"
}

// createdPayload is a .created event's payload, for the new row n.
func (p *plan) createdPayload() string {
	if p.shape.plane {
		return payload(p.enriched("n"), emptyObject)
	}
	return payload(p.enriched("n"), "NULL")
}

// deletedPayload is a .deleted event's payload, for the old row o.
func (p *plan) deletedPayload() string {
	if p.shape.plane {
		return payload(p.deletedData(), p.data("o"))
	}
	return payload(p.enriched("o"), "NULL")
}

// initiator is the initiator_id of the row on side, from column when set.
func (p *plan) initiator(side, column string) string {
	setting := "nullif(pg_catalog.current_setting(" + literal(p.spec.InitiatorIDSetting) + ", true), '')"
	if column == "" {
		return setting
	}
	return "coalesce(" + ref(side, column) + "::text, " + setting + ")"
}

// onConvert writes, for each updated row that changed an event's worth
// and moved between the Kind and the rest, the conversion event Plane
// writes after the update's: <prefix>.converted.to_<kind prefix> or the
// reverse, with the new row and the old Kind column.
func (p *plan) onConvert(src sources) string {
	k := p.shape.kind
	to := literal(p.spec.EventPrefix + ".converted.to_" + k.Prefix)
	back := literal(k.Prefix + ".converted.to_" + p.spec.EventPrefix)
	eventType := "CASE WHEN " + p.isKind("n") + " THEN " + to + " ELSE " + back + " END"
	id, ws, proj := p.envelope("n")
	from := fmt.Sprintf(`FROM %s AS o
		JOIN %s AS n ON %s
		WHERE %s AND %s IS DISTINCT FROM %s AND (%s) <> (%s)`,
		src.old, src.new, p.samePair("o", "n"), p.only("o", "n"), ref("o", k.Column), ref("n", k.Column), p.kindOf("o"), p.kindOf("n"))
	if p.softDelete != "" {
		from += " AND NOT (" + ref("o", p.softDelete) + " IS NULL AND " + ref("n", p.softDelete) + " IS NOT NULL)"
	}
	return p.insert(eventType, p.entityType(false), id, ws, proj, p.initiator("n", p.shape.modifier),
		payload(p.enriched("n"), "pg_catalog.jsonb_build_object("+literal(k.Column)+", "+ref("o", k.Column)+")"), from)
}
