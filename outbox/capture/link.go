package capture

import (
	"context"
	"fmt"
	"slices"

	"github.com/warrenmq/warren/outbox"
)

// parentRow is a ParentOf resolved against the catalog.
type parentRow struct {
	ParentOf
	t     *table
	table string // quoted with its schema
}

// linkParent is a LinkOf resolved against the catalog: the Enrich array
// of this table.
type linkParent struct {
	LinkOf
	list enrichment
}

// resolveParent checks Spec.Parent: the parent and its columns exist, its
// key has the entity id's type and a unique index, and no key data gets
// from elsewhere hides one of its columns.
func (p *plan) resolveParent(ctx context.Context, db outbox.DB) error {
	l := p.spec.Parent
	if l == nil {
		return nil
	}
	parent, err := readLinked(ctx, db, l.Table)
	if err != nil {
		return fmt.Errorf("capture: Parent: %w", err)
	}
	if err := parent.need("Parent", append([]string{l.KeyColumn}, l.Exclude...)...); err != nil {
		return err
	}
	id, _ := p.source.column(p.entityID)
	if key, _ := parent.column(l.KeyColumn); key.typ != id.typ {
		return invalidf("Parent: %s.%s is %s and the entity id %s is %s; the lookup compares them with =", parent.name, l.KeyColumn, key.typ, p.entityID, id.typ)
	}
	if err := parent.comparable(ctx, db, "Parent", l.KeyColumn, ""); err != nil {
		return err
	}
	// The lookup of a row's parent must find one row at most.
	var unique bool
	err = db.QueryRow(ctx, `
		SELECT EXISTS (SELECT FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
			WHERE i.indrelid = $1::regclass AND i.indisunique AND i.indimmediate AND i.indisvalid AND i.indpred IS NULL AND i.indnkeyatts = 1
				AND a.attname = $2 AND i.indcollation[0] IN (0, a.attcollation))`,
		quote(parent.schema)+"."+quote(parent.name), l.KeyColumn).Scan(&unique)
	if err != nil {
		return fmt.Errorf("capture: Parent: read the indexes of %s: %w", parent.name, err)
	}
	if !unique {
		return invalidf("Parent: %s.%s has no unique index of its own (valid, NOT DEFERRABLE, not partial, in the column's collation): a row would find several parents", parent.name, l.KeyColumn)
	}
	hides := func(key string) bool { _, ok := parent.column(key); return ok && !slices.Contains(l.Exclude, key) }
	for _, e := range p.shape.enrich {
		if hides(e.Key) {
			return invalidf("Enrich: key %q is a column of the parent %s, whose value it would hide", e.Key, parent.name)
		}
		if e.Key == l.As {
			return invalidf("Parent.As %q is an Enrich key too", l.As)
		}
	}
	if l.As != "" && hides(l.As) {
		return invalidf("Parent.As %q is a column of the parent %s, whose value it would hide", l.As, parent.name)
	}
	p.shape.parent = &parentRow{ParentOf: *l, t: parent, table: quote(parent.schema) + "." + quote(parent.name)}
	return nil
}

// resolveLink checks Spec.Link: List is the Enrich array of this table,
// read with its soft delete column as the live one.
func (p *plan) resolveLink() error {
	l := p.spec.Link
	if l == nil {
		return nil
	}
	if len(p.spec.Ignore) > 0 || len(p.spec.UpdateVerbs) > 0 {
		return invalidf("Link: a link table writes no updates of its own; Ignore and UpdateVerbs mean nothing with it")
	}
	r := &linkParent{LinkOf: *l}
	i := slices.IndexFunc(p.shape.enrich, func(e enrichment) bool { return e.Key == l.List })
	if i < 0 {
		return invalidf("Link: List %q is not an Enrich key", l.List)
	}
	r.list = p.shape.enrich[i]
	own := quote(p.source.schema) + "." + quote(p.source.name)
	switch {
	case r.list.table != own:
		return invalidf("Link: Enrich %q reads %s, not the captured table %s", l.List, r.list.table, own)
	case r.list.LinkColumn != p.entityID:
		return invalidf("Link: Enrich %q links by %s, not by the entity id %s", l.List, r.list.LinkColumn, p.entityID)
	case r.list.LiveColumn != p.softDelete:
		return invalidf("Link: Enrich %q counts rows live by %q, and the table's soft delete column is %q", l.List, r.list.LiveColumn, p.softDelete)
	}
	p.shape.link = r
	return nil
}

// parentData is the parent's row, as data holds it, for the row on side;
// NULL when the parent is missing, as Plane's lookup finds. The row is
// read whole, not by a column list written at generation: a migration of
// the parent (a column added or dropped) changes its events, which a
// list would miss or fail on, until capture ran again for every link.
func (p *plan) parentData(side string) string {
	l := p.shape.parent
	row := "pg_catalog.to_jsonb(warren_p)"
	for _, c := range l.Exclude {
		row += " OPERATOR(pg_catalog.-) " + literal(c)
	}
	return fmt.Sprintf("(SELECT %s FROM %s AS warren_p WHERE warren_p.%s = %s)", row, l.table, quote(l.KeyColumn), ref(side, p.entityID))
}

// parentExists is true when the parent of the row on side is there.
func (p *plan) parentExists(side string) string {
	l := p.shape.parent
	return fmt.Sprintf("EXISTS (SELECT 1 FROM %s AS warren_p WHERE warren_p.%s = %s)", l.table, quote(l.KeyColumn), ref(side, p.entityID))
}

// linkPayload is an added or removed link's payload: the parent with its
// arrays now, and the link's array before.
func (p *plan) linkPayload(side, before string) string {
	return payload(p.parentEnriched(side), "pg_catalog.jsonb_build_object("+literal(p.shape.link.List)+", "+before+")")
}

// onLinkAdded writes the parent's Added event per inserted live row (one
// inserted soft deleted is in no list); the array before it is the array
// now without the row.
func (p *plan) onLinkAdded(src sources) string {
	before := p.list(p.shape.link.list, "n", " AND NOT ("+sameKey(p.source.primaryKey, "warren_e", "n")+")")
	id, ws, proj := p.envelope("n")
	return p.insert(p.eventType("n", p.shape.link.Added), p.entityType(true), id, ws, proj, p.initiator("n", p.shape.creator),
		p.linkPayload("n", before), "FROM "+src.new+" AS n WHERE "+p.live("n"))
}

// linkRemoved is the Removed event of each old row from, which the
// statement removed; the array before it is the array now with the row,
// in its place.
func (p *plan) linkRemoved(initiator, from string) string {
	e := p.shape.link.list
	order, orderBy, oOrder, live := "", "", "", ""
	if e.OrderColumn != "" {
		order = ", " + ref("warren_e", e.OrderColumn) + " AS warren_order"
		orderBy = " ORDER BY warren_e.warren_order"
		oOrder = ", " + ref("o", e.OrderColumn)
	}
	if e.LiveColumn != "" {
		live = " AND warren_e." + quote(e.LiveColumn) + " IS NULL"
	}
	before := fmt.Sprintf(`(SELECT coalesce(pg_catalog.jsonb_agg(warren_e.warren_value%s), '[]'::jsonb) FROM (
			SELECT warren_e.%s AS warren_value%s FROM %s AS warren_e WHERE warren_e.%s = %s%s
			UNION ALL SELECT %s%s) AS warren_e)`,
		orderBy, quote(e.ValueColumn), order, e.table, quote(e.LinkColumn), ref("o", p.entityID), live,
		ref("o", e.ValueColumn), oOrder)
	id, ws, proj := p.envelope("o")
	return p.insert(p.eventType("o", p.shape.link.Removed), p.entityType(true), id, ws, proj, initiator, p.linkPayload("o", before), from)
}

// onLinkRemoved writes the Removed events of a soft delete: the old
// versions of the rows that went from live to deleted, paired with their
// new versions by the primary key alone, so that a row soft deleted and
// moved to another parent in one statement is still removed from the one
// it had (Plane's row trigger sees it so). A row moved without a soft
// delete writes nothing, as in Plane.
func (p *plan) onLinkRemoved(src sources) string {
	from := fmt.Sprintf("FROM %s AS o JOIN %s AS n ON %s\n\t\tWHERE %s IS NULL AND %s IS NOT NULL",
		src.old, src.new, sameKey(p.source.primaryKey, "o", "n"), ref("o", p.softDelete), ref("n", p.softDelete))
	return p.linkRemoved(p.initiator("n", p.shape.modifier), from)
}

// onLinkDeleted writes the Removed events of a DELETE of live rows; a
// soft-deleted row was removed when it was soft deleted, and a row whose
// parent is gone (a cascade from the parent's DELETE) ended with it.
func (p *plan) onLinkDeleted(src sources) string {
	from := "FROM " + src.old + " AS o\n\t\tWHERE " + p.parentExists("o") + " AND " + p.live("o")
	return p.linkRemoved(p.initiator("o", p.shape.modifier), from)
}

// linkOps is ops for a link table.
func (p *plan) linkOps(src sources) string {
	update := "\t\tNULL; -- no soft delete column: no update is a removal"
	if p.softDelete != "" {
		update = p.guarded("UPDATE", p.ids(src.new, "n")+" UNION "+p.ids(src.old, "o"), p.onLinkRemoved(src))
	}
	return fmt.Sprintf(`	IF TG_OP = 'INSERT' THEN
%s
	ELSIF TG_OP = 'UPDATE' THEN
%s
	ELSIF TG_OP = 'DELETE' THEN
%s
	END IF;`,
		p.guarded("INSERT", p.ids(src.new, "n"), p.onLinkAdded(src)), update,
		p.guarded("DELETE", p.ids(src.old, "o"), p.onLinkDeleted(src)))
}
