package capture

import (
	"context"
	"fmt"
	"slices"

	"github.com/warrenmq/warren/outbox"
)

// PlaneIssues is the Spec whose events are those Plane's triggers write
// for its issues table (table: "issues" or "schema.issues"):
//
//   - workitem.created, .updated, .deleted, and epic.* for a row whose
//     type (issue_types.is_epic) is an epic; workitem.state.updated for a
//     change of state_id; workitem.converted.to_epic and
//     epic.converted.to_workitem after an update that changes the type;
//   - data without the description columns, with assignee_ids and
//     label_ids read from issue_assignees and issue_labels (live links,
//     in their created_at order);
//   - previous_attributes as Plane writes them: the JSON string "{}" on
//     create, the old row on delete, old values as text on update;
//   - no event for a write that changes only updated_at, updated_by_id,
//     last_activity_at or the description columns;
//   - initiator_id from created_by_id or updated_by_id, initiator_type
//     from plane.initiator_type.
//
// It reads the catalog for the columns Plane's versions differ in
// (description or description_json, last_activity_at) and fails when the
// tables Plane's triggers read are missing. Where warren differs from
// Plane on purpose (a hard DELETE writes .deleted; initiator_type ” is
// USER; the text of old values does not depend on the writer's TimeZone
// and DateStyle) docs/plane.md says so.
func PlaneIssues(ctx context.Context, db outbox.DB, table string) (Spec, error) {
	src, err := readPlane(ctx, db, table)
	if err != nil {
		return Spec{}, err
	}
	// Plane's triggers drop these from data and never compare them; a
	// version of Plane has some of them.
	present := func(names ...string) []string {
		return slices.DeleteFunc(names, func(n string) bool { _, ok := src.column(n); return !ok })
	}
	sibling := func(name string) string { return src.schema + "." + name }
	for _, t := range []string{"issue_assignees", "issue_labels", "issue_types"} {
		if _, _, err := locate(ctx, db, sibling(t)); err != nil {
			return Spec{}, fmt.Errorf("capture: Plane's issue triggers read %s: %w", sibling(t), err)
		}
	}
	return planeIssueSpec(src, present("description_html", "description_binary", "description", "description_stripped"),
		present("updated_at", "updated_by_id", "last_activity_at")), nil
}

// planeIssueSpec is PlaneIssues's Spec for the issues table src: exclude
// are its description columns, ignore its timestamps.
func planeIssueSpec(src *table, exclude, ignore []string) Spec {
	sibling := func(name string) string { return src.schema + "." + name }
	// id, not the primary key: a partitioned issues table's key has its
	// partition key too.
	s := planeBase(src, "issue", "workitem", "id")
	s.Exclude, s.Ignore = exclude, ignore
	s.UpdateVerbs = []ColumnVerb{{Column: "state_id", Verb: "state.updated"}}
	s.Enrich = []Enrichment{
		{Key: "assignee_ids", Table: sibling("issue_assignees"), LinkColumn: "issue_id", ValueColumn: "assignee_id", OrderColumn: "created_at", LiveColumn: "deleted_at"},
		{Key: "label_ids", Table: sibling("issue_labels"), LinkColumn: "issue_id", ValueColumn: "label_id", OrderColumn: "created_at", LiveColumn: "deleted_at"},
	}
	s.Kind = &KindPrefix{Column: "type_id", Table: sibling("issue_types"), KeyColumn: "id", FlagColumn: "is_epic", Prefix: "epic"}
	return s
}

// planeBase is what every Plane table's Spec shares: the envelope's
// columns, the initiators, Plane's shapes.
func planeBase(src *table, entity, prefix, id string) Spec {
	return Spec{
		Table:                src.schema + "." + src.name,
		EntityType:           entity,
		EventPrefix:          prefix,
		EntityIDColumn:       id,
		WorkspaceColumn:      "workspace_id",
		ProjectColumn:        "project_id",
		InitiatorTypeSetting: "plane.initiator_type",
		CreatorColumn:        "created_by_id",
		ModifierColumn:       "updated_by_id",
		Shape:                ShapePlane,
	}
}

// readPlane reads the columns of a table a Plane profile is for.
func readPlane(ctx context.Context, db outbox.DB, table string) (*table, error) {
	if err := tableName("table", table); err != nil {
		return nil, err
	}
	return readLinked(ctx, db, table)
}

// PlaneIssueAssignees is the Spec whose events are those Plane's triggers
// write for its issue_assignees table (issues: the issues table beside
// it, "issues" or "schema.issues"): workitem.assignee.added for an
// inserted row and workitem.assignee.removed for a soft delete (epic.* when
// the issue is an epic), about the issue: entity_type issue_assignee,
// entity_id the issue's id, data the issue's row as PlaneIssues writes it,
// previous_attributes {"assignee_ids": the list before}.
func PlaneIssueAssignees(ctx context.Context, db outbox.DB, table, issues string) (Spec, error) {
	return planeLinkTable(ctx, db, table, issues, "issue_assignee", "assignee", "assignee_ids")
}

// PlaneIssueLabels is [PlaneIssueAssignees] for issue_labels:
// workitem.label.added and workitem.label.removed, entity_type
// issue_label, previous_attributes {"label_ids": the list before}.
func PlaneIssueLabels(ctx context.Context, db outbox.DB, table, issues string) (Spec, error) {
	return planeLinkTable(ctx, db, table, issues, "issue_label", "label", "label_ids")
}

// planeLinkTable is the Spec of a Plane table of an issue's assignees or
// labels.
func planeLinkTable(ctx context.Context, db outbox.DB, table, issues, entity, noun, list string) (Spec, error) {
	issueSpec, err := PlaneIssues(ctx, db, issues)
	if err != nil {
		return Spec{}, err
	}
	src, err := readPlane(ctx, db, table)
	if err != nil {
		return Spec{}, err
	}
	s := planeBase(src, entity, "workitem", "issue_id")
	s.Enrich, s.Kind = issueSpec.Enrich, issueSpec.Kind
	s.Parent = &ParentOf{Table: issueSpec.Table, KeyColumn: "id", Exclude: issueSpec.Exclude}
	s.Link = &LinkOf{Added: noun + ".added", Removed: noun + ".removed", List: list}
	return s, nil
}

// PlaneStates is the Spec whose events are those Plane's triggers write
// for its states table: state.created, state.updated and state.deleted,
// shaped as [PlaneIssues]'s are (the whole row in data, no enrichment), no
// event for a write that changes only updated_at or updated_by_id.
func PlaneStates(ctx context.Context, db outbox.DB, table string) (Spec, error) {
	return planeRows(ctx, db, table, "state")
}

// PlaneLabels is [PlaneStates] for Plane's labels table: label.created,
// label.updated and label.deleted.
func PlaneLabels(ctx context.Context, db outbox.DB, table string) (Spec, error) {
	return planeRows(ctx, db, table, "label")
}

// planeRows is the Spec of a Plane table whose triggers write an event of
// its own entity per row change.
func planeRows(ctx context.Context, db outbox.DB, table, entity string) (Spec, error) {
	src, err := readPlane(ctx, db, table)
	if err != nil {
		return Spec{}, err
	}
	s := planeBase(src, entity, entity, "id")
	s.Ignore = []string{"updated_at", "updated_by_id"}
	return s, nil
}

// PlaneIssueComments is the Spec whose events are those Plane's triggers
// write for its issue_comments table (issues: the issues table beside
// it): workitem.comment.created, .comment.updated and .comment.deleted
// (epic.* when the issue is an epic) about the issue: entity_type issue,
// entity_id the issue's id, data the issue's row as [PlaneIssues] writes
// it with the comment's row under "comment" (without it on delete),
// previous_attributes as for an issue's own events; no event for a write
// that changes only updated_at.
func PlaneIssueComments(ctx context.Context, db outbox.DB, table, issues string) (Spec, error) {
	issueSpec, src, err := planeChild(ctx, db, table, issues)
	if err != nil {
		return Spec{}, err
	}
	s := planeBase(src, "issue", "workitem", "issue_id")
	s.Enrich, s.Kind, s.Ignore = issueSpec.Enrich, issueSpec.Kind, []string{"updated_at"}
	s.Parent = &ParentOf{Table: issueSpec.Table, KeyColumn: "id", Exclude: issueSpec.Exclude, As: "comment"}
	s.Verbs = &RowVerbs{Created: "comment.created", Updated: "comment.updated", Deleted: "comment.deleted"}
	return s, nil
}

// PlaneIssueLinks is the Spec whose events are those Plane's triggers
// write for its issue_links table (issues: the issues table beside it):
// workitem.link.added, .link.updated and .link.removed (epic.* when the
// issue is an epic), entity_id the issue's id, entity_type issue_link on
// insert and issue after, data the link's row, previous_attributes as
// [PlaneStates]'s; no event for a write that changes only updated_at.
func PlaneIssueLinks(ctx context.Context, db outbox.DB, table, issues string) (Spec, error) {
	return planeIssueChild(ctx, db, table, issues, "issue_link", "link", "issue")
}

// PlaneIssueRelations is [PlaneIssueLinks] for issue_relations:
// workitem.relation.added, .relation.updated and .relation.removed,
// entity_type issue_relation on insert and issue after.
func PlaneIssueRelations(ctx context.Context, db outbox.DB, table, issues string) (Spec, error) {
	return planeIssueChild(ctx, db, table, issues, "issue_relation", "relation", "issue")
}

// PlaneIssueAttachments is [PlaneIssueLinks] for Plane's file_assets
// table, whose rows of entity_type ISSUE_ATTACHMENT only (an insert or
// delete of one, an update whose old or new version is one) write
// workitem.attachment.added, .attachment.updated and .attachment.removed,
// entity_type issue_attachment.
func PlaneIssueAttachments(ctx context.Context, db outbox.DB, table, issues string) (Spec, error) {
	s, err := planeIssueChild(ctx, db, table, issues, "issue_attachment", "attachment", "")
	s.Only = &ColumnValue{Column: "entity_type", Value: "ISSUE_ATTACHMENT"}
	return s, err
}

// planeIssueChild is the Spec of a Plane table whose rows write events of
// their own about their issue; changed is the entity type of the events
// after the insert's, "" for the same.
func planeIssueChild(ctx context.Context, db outbox.DB, table, issues, entity, noun, changed string) (Spec, error) {
	issueSpec, src, err := planeChild(ctx, db, table, issues)
	if err != nil {
		return Spec{}, err
	}
	s := planeBase(src, entity, "workitem", "issue_id")
	s.ChangedEntityType, s.Kind, s.Ignore = changed, issueSpec.Kind, []string{"updated_at"}
	s.Parent = &ParentOf{Table: issueSpec.Table, KeyColumn: "id"}
	s.Verbs = &RowVerbs{Created: noun + ".added", Updated: noun + ".updated", Deleted: noun + ".removed"}
	return s, nil
}

// planeChild reads a table of what an issue has and the issues' Spec.
func planeChild(ctx context.Context, db outbox.DB, table, issues string) (Spec, *table, error) {
	issueSpec, err := PlaneIssues(ctx, db, issues)
	if err != nil {
		return Spec{}, nil, err
	}
	src, err := readPlane(ctx, db, table)
	return issueSpec, src, err
}

// PlaneCycleIssues is the Spec whose events are those Plane's triggers
// write for its cycle_issues table: workitem.cycle.added (data the row,
// previous_attributes "{}"), workitem.cycle.moved for an update that
// changes cycle_id (data the new row, previous_attributes the whole old
// one), workitem.cycle.removed for a soft delete; entity_type
// cycle_issue, entity_id the issue's id, never epic.*.
func PlaneCycleIssues(ctx context.Context, db outbox.DB, table, issues string) (Spec, error) {
	return planeMembership(ctx, db, table, issues, "cycle", true)
}

// PlaneModuleIssues is [PlaneCycleIssues] for module_issues:
// workitem.module.added, .module.moved for an update that changes any
// column, .module.removed; entity_type module_issue.
func PlaneModuleIssues(ctx context.Context, db outbox.DB, table, issues string) (Spec, error) {
	return planeMembership(ctx, db, table, issues, "module", false)
}

// planeMembership is the Spec of a Plane table of an issue's membership
// of a cycle or a module; with onlyMoves, only a change of <noun>_id
// writes .moved.
func planeMembership(ctx context.Context, db outbox.DB, table, issues, noun string, onlyMoves bool) (Spec, error) {
	issueSpec, src, err := planeChild(ctx, db, table, issues)
	if err != nil {
		return Spec{}, err
	}
	if _, ok := src.column(noun + "_id"); !ok {
		return Spec{}, fmt.Errorf("capture: %s has no column %s_id: not Plane's %s_issues", table, noun, noun)
	}
	s := planeBase(src, noun+"_issue", "workitem", "issue_id")
	// The issue is the Parent only so that a membership that ends with
	// its issue (a cascade) writes nothing: no epic.* here.
	s.PreviousRow, s.Parent = true, &ParentOf{Table: issueSpec.Table, KeyColumn: "id"}
	s.Verbs = &RowVerbs{Created: noun + ".added", Updated: noun + ".moved", Deleted: noun + ".removed"}
	for _, c := range src.columns {
		if onlyMoves && c.name != noun+"_id" {
			s.Ignore = append(s.Ignore, c.name)
		}
	}
	return s, nil
}
