package plane

import (
	"encoding/json"
	"time"

	"github.com/warrenmq/warren/contract"
)

// Version is the envelope version of Plane's events, which their
// contracts are for (warren.PlaneEnvelopeVersion).
const Version = "1.0"

// WorkItem is the data of the workitem.* and epic.* events about an issue
// itself (created, updated, state.updated, the conversions, and the
// assignee and label events): the issue's row without its description
// columns, with the ids of its live assignees and labels.
type WorkItem struct {
	ID          string     `json:"id" jsonschema:"format=uuid"`
	Name        string     `json:"name"`
	Priority    string     `json:"priority" jsonschema:"enum=urgent,enum=high,enum=medium,enum=low,enum=none"`
	StateID     *string    `json:"state_id" jsonschema:"format=uuid"`
	TypeID      *string    `json:"type_id" jsonschema:"format=uuid"`
	ParentID    *string    `json:"parent_id" jsonschema:"format=uuid"`
	SequenceID  int64      `json:"sequence_id"`
	SortOrder   float64    `json:"sort_order"`
	IsDraft     bool       `json:"is_draft"`
	WorkspaceID string     `json:"workspace_id" jsonschema:"format=uuid"`
	ProjectID   string     `json:"project_id" jsonschema:"format=uuid"`
	AssigneeIDs []string   `json:"assignee_ids"`
	LabelIDs    []string   `json:"label_ids"`
	CreatedAt   time.Time  `json:"created_at"`
	UpdatedAt   time.Time  `json:"updated_at"`
	DeletedAt   *time.Time `json:"deleted_at"`

	// Columns some Plane versions have and others not.
	StartDate       *string         `json:"start_date,omitempty" jsonschema:"format=date"`
	TargetDate      *string         `json:"target_date,omitempty" jsonschema:"format=date"`
	ArchivedAt      *string         `json:"archived_at,omitempty" jsonschema:"format=date"`
	CompletedAt     *time.Time      `json:"completed_at,omitempty"`
	LastActivityAt  *time.Time      `json:"last_activity_at,omitempty"`
	EstimatePoint   json.RawMessage `json:"estimate_point,omitempty"`
	ExternalSource  *string         `json:"external_source,omitempty"`
	ExternalID      *string         `json:"external_id,omitempty"`
	CreatedByID     *string         `json:"created_by_id,omitempty" jsonschema:"format=uuid"`
	UpdatedByID     *string         `json:"updated_by_id,omitempty" jsonschema:"format=uuid"`
	DescriptionJSON json.RawMessage `json:"description_json,omitempty"`
}

// Comment is an issue_comments row, under "comment" in the data of
// workitem.comment.created and .comment.updated.
type Comment struct {
	ID          string          `json:"id" jsonschema:"format=uuid"`
	IssueID     string          `json:"issue_id" jsonschema:"format=uuid"`
	ActorID     *string         `json:"actor_id" jsonschema:"format=uuid"`
	Access      string          `json:"access"`
	CommentHTML string          `json:"comment_html"`
	CommentJSON json.RawMessage `json:"comment_json"`
	Attachments []string        `json:"attachments,omitempty"`
	EditedAt    *time.Time      `json:"edited_at,omitempty"`
	WorkspaceID string          `json:"workspace_id" jsonschema:"format=uuid"`
	ProjectID   string          `json:"project_id" jsonschema:"format=uuid"`
	CreatedAt   time.Time       `json:"created_at"`
	UpdatedAt   time.Time       `json:"updated_at"`
	DeletedAt   *time.Time      `json:"deleted_at"`
}

// Commented is the data of workitem.comment.created and .updated: the
// issue as WorkItem has it, with the comment. It is null when the
// comment's issue is gone (Plane's trigger finds no issue row), which
// warren.Typed dead-letters.
type Commented struct {
	WorkItem
	Comment Comment `json:"comment"`
}

// Link is an issue_links row: the data of workitem.link.added and
// .link.updated.
type Link struct {
	ID          string          `json:"id" jsonschema:"format=uuid"`
	IssueID     string          `json:"issue_id" jsonschema:"format=uuid"`
	URL         string          `json:"url"`
	Title       *string         `json:"title"`
	Metadata    json.RawMessage `json:"metadata,omitempty"`
	WorkspaceID string          `json:"workspace_id" jsonschema:"format=uuid"`
	ProjectID   string          `json:"project_id" jsonschema:"format=uuid"`
	CreatedAt   time.Time       `json:"created_at"`
	UpdatedAt   time.Time       `json:"updated_at"`
	DeletedAt   *time.Time      `json:"deleted_at"`
}

// Relation is an issue_relations row: the data of workitem.relation.added
// and .relation.updated.
type Relation struct {
	ID             string     `json:"id" jsonschema:"format=uuid"`
	IssueID        string     `json:"issue_id" jsonschema:"format=uuid"`
	RelatedIssueID string     `json:"related_issue_id" jsonschema:"format=uuid"`
	RelationType   string     `json:"relation_type"`
	WorkspaceID    string     `json:"workspace_id" jsonschema:"format=uuid"`
	ProjectID      string     `json:"project_id" jsonschema:"format=uuid"`
	CreatedAt      time.Time  `json:"created_at"`
	UpdatedAt      time.Time  `json:"updated_at"`
	DeletedAt      *time.Time `json:"deleted_at"`
}

// Attachment is a file_assets row of entity_type ISSUE_ATTACHMENT: the
// data of workitem.attachment.added and .attachment.updated.
type Attachment struct {
	ID          string          `json:"id" jsonschema:"format=uuid"`
	IssueID     *string         `json:"issue_id" jsonschema:"format=uuid"`
	Asset       string          `json:"asset"`
	EntityType  *string         `json:"entity_type"`
	Attributes  json.RawMessage `json:"attributes,omitempty"`
	IsUploaded  bool            `json:"is_uploaded"`
	Size        float64         `json:"size"`
	WorkspaceID *string         `json:"workspace_id" jsonschema:"format=uuid"`
	ProjectID   *string         `json:"project_id" jsonschema:"format=uuid"`
	CreatedAt   time.Time       `json:"created_at"`
	UpdatedAt   time.Time       `json:"updated_at"`
	DeletedAt   *time.Time      `json:"deleted_at"`
}

// Membership is a cycle_issues or module_issues row: the data of
// workitem.cycle.added and .moved (CycleID set) and workitem.module.added
// and .moved (ModuleID set).
type Membership struct {
	ID          string     `json:"id" jsonschema:"format=uuid"`
	IssueID     string     `json:"issue_id" jsonschema:"format=uuid"`
	CycleID     *string    `json:"cycle_id,omitempty" jsonschema:"format=uuid"`
	ModuleID    *string    `json:"module_id,omitempty" jsonschema:"format=uuid"`
	WorkspaceID string     `json:"workspace_id" jsonschema:"format=uuid"`
	ProjectID   string     `json:"project_id" jsonschema:"format=uuid"`
	CreatedAt   time.Time  `json:"created_at"`
	UpdatedAt   time.Time  `json:"updated_at"`
	DeletedAt   *time.Time `json:"deleted_at"`
}

// State is a states row: the data of state.created and state.updated.
type State struct {
	ID          string     `json:"id" jsonschema:"format=uuid"`
	Name        string     `json:"name"`
	Color       string     `json:"color"`
	Group       string     `json:"group" jsonschema:"enum=backlog,enum=unstarted,enum=started,enum=completed,enum=cancelled,enum=triage"`
	Sequence    float64    `json:"sequence"`
	Default     bool       `json:"default"`
	Description string     `json:"description"`
	WorkspaceID string     `json:"workspace_id" jsonschema:"format=uuid"`
	ProjectID   string     `json:"project_id" jsonschema:"format=uuid"`
	CreatedAt   time.Time  `json:"created_at"`
	UpdatedAt   time.Time  `json:"updated_at"`
	DeletedAt   *time.Time `json:"deleted_at"`
}

// Label is a labels row: the data of label.created and label.updated. A
// workspace's label has no project.
type Label struct {
	ID          string     `json:"id" jsonschema:"format=uuid"`
	Name        string     `json:"name"`
	Color       string     `json:"color"`
	ParentID    *string    `json:"parent_id" jsonschema:"format=uuid"`
	SortOrder   float64    `json:"sort_order"`
	Description string     `json:"description"`
	WorkspaceID string     `json:"workspace_id" jsonschema:"format=uuid"`
	ProjectID   *string    `json:"project_id" jsonschema:"format=uuid"`
	CreatedAt   time.Time  `json:"created_at"`
	UpdatedAt   time.Time  `json:"updated_at"`
	DeletedAt   *time.Time `json:"deleted_at"`
}

// Removed is the data of the events that end something (workitem.deleted,
// .link.removed, state.deleted, …): Plane writes the JSON string "{}",
// which warren reads as the empty object.
type Removed struct{}

// Contracts returns the contracts of every event type Plane's triggers
// write, at Version. Each call builds a new Set.
func Contracts() (*contract.Set, error) {
	var cs []contract.Contract
	add := func(c contract.Contract, err error) error {
		if err == nil {
			cs = append(cs, c)
		}
		return err
	}
	for _, prefix := range []string{"workitem", "epic"} {
		for _, verb := range []string{"created", "updated", "state.updated", "assignee.added", "assignee.removed", "label.added", "label.removed", "comment.deleted"} {
			if err := add(contract.Of[WorkItem](prefix+"."+verb, Version)); err != nil {
				return nil, err
			}
		}
		for _, verb := range []string{"comment.created", "comment.updated"} {
			c, err := contract.Of[Commented](prefix+"."+verb, Version)
			if err == nil {
				c, err = orNull(c)
			}
			if err := add(c, err); err != nil {
				return nil, err
			}
		}
		for verb, of := range map[string]func(string, string) (contract.Contract, error){
			"link.added": contract.Of[Link], "link.updated": contract.Of[Link],
			"relation.added": contract.Of[Relation], "relation.updated": contract.Of[Relation],
			"attachment.added": contract.Of[Attachment], "attachment.updated": contract.Of[Attachment],
		} {
			if err := add(of(prefix+"."+verb, Version)); err != nil {
				return nil, err
			}
		}
		for _, verb := range []string{"deleted", "link.removed", "relation.removed", "attachment.removed"} {
			if err := add(contract.Of[Removed](prefix+"."+verb, Version)); err != nil {
				return nil, err
			}
		}
	}
	// Only work items convert, and only they join cycles and modules.
	for typ, of := range map[string]func(string, string) (contract.Contract, error){
		"workitem.converted.to_epic": contract.Of[WorkItem], "epic.converted.to_workitem": contract.Of[WorkItem],
		"workitem.cycle.added": contract.Of[Membership], "workitem.cycle.moved": contract.Of[Membership], "workitem.cycle.removed": contract.Of[Removed],
		"workitem.module.added": contract.Of[Membership], "workitem.module.moved": contract.Of[Membership], "workitem.module.removed": contract.Of[Removed],
		"state.created": contract.Of[State], "state.updated": contract.Of[State], "state.deleted": contract.Of[Removed],
		"label.created": contract.Of[Label], "label.updated": contract.Of[Label], "label.deleted": contract.Of[Removed],
	} {
		if err := add(of(typ, Version)); err != nil {
			return nil, err
		}
	}
	return contract.NewSet(cs...)
}

// orNull lets c's data be null as well as the object it describes: an
// object's keywords (properties, required) do not apply to null.
func orNull(c contract.Contract) (contract.Contract, error) {
	var doc map[string]any
	if err := json.Unmarshal(c.Schema, &doc); err != nil {
		return c, err
	}
	doc["type"] = []any{"object", "null"}
	b, err := json.MarshalIndent(doc, "", "  ")
	c.Schema = b
	return c, err
}
