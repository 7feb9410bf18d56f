package capture

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/warrenmq/warren/outbox"
)

// FailurePolicy says what the trigger does when it cannot write an event.
type FailurePolicy string

const (
	// Fail lets the outbox insert's error fail the statement that changed
	// the table, so the change and its event commit together or not at
	// all. The default.
	Fail FailurePolicy = "fail"
	// Record lets the statement succeed and writes the failure (table,
	// operation, entity ids, SQLSTATE, message, time) to the outbox's
	// capture errors table in the same transaction, where `warren outbox
	// stats`, [outbox.Stats] and the relay's metrics count it. An error a
	// retry would cure (SQLSTATE class 08, 40, 53 or 57, or 55P03
	// lock_not_available) is not recorded: it fails the statement, for
	// the application to retry.
	Record FailurePolicy = "record"
)

// SubscriberPolicy says what the trigger does when a logical replication
// worker writes the captured table: the table is on the subscriber's end of
// a logical replication, and whether the publisher captures it too is
// something only the operator knows. See docs/adr/024-capture-replication-role.md.
type SubscriberPolicy string

const (
	// SubscriberRefuse fails the replicated write with an error naming
	// the subscription, so the subscription stops (and retries) until
	// the operator installs again with one of the others: neither a
	// write without its event nor an event written twice. The default.
	SubscriberRefuse SubscriberPolicy = "refuse"
	// SubscriberCapture writes the events of replicated writes like any
	// other: the subscriber is the only end that captures the table.
	SubscriberCapture SubscriberPolicy = "capture"
	// SubscriberSkip writes no event for what a replication worker
	// writes: the publisher captures the same table and its outbox holds
	// the events already. Every other session still writes its events.
	SubscriberSkip SubscriberPolicy = "skip"
)

// Defaults of [Spec].
const (
	DefaultInitiatorTypeSetting = "warren.initiator_type"
	DefaultInitiatorIDSetting   = "warren.initiator_id"
	DefaultInitiatorType        = "USER"
	DefaultSoftDeleteColumn     = "deleted_at"
)

// Spec says which table to capture and what events to write for it.
type Spec struct {
	// Table is the captured table: "name" or "schema.name", lower-case
	// unquoted identifiers. Required.
	Table string

	// EntityType is each event's entity_type; default the table's name.
	EntityType string
	// EventPrefix is the event types' prefix: "workitem" makes
	// workitem.created, workitem.updated and workitem.deleted; default
	// EntityType.
	EventPrefix string

	// EntityIDColumn holds each event's entity_id; default the primary
	// key, which must then be a single column. Whatever it is, the table
	// needs a primary key: the update trigger pairs each row's old and new
	// versions by it.
	EntityIDColumn string

	// Columns are the tracked columns: what payload.data holds and what
	// an update is compared on. Default every column of the table when the
	// trigger is generated, read once from the catalog and written into
	// the trigger; Exclude removes columns from either list (Plane leaves
	// out description_html and its siblings).
	Columns, Exclude []string

	// WorkspaceColumn and ProjectColumn, when set, fill workspace_id and
	// project_id.
	WorkspaceColumn, ProjectColumn string

	// SoftDeleteColumn is the column whose change from NULL to a value
	// makes an update a .deleted event. Default "deleted_at" when the
	// table has it; NoSoftDelete turns soft deletes off.
	SoftDeleteColumn string
	NoSoftDelete     bool

	// InitiatorTypeSetting and InitiatorIDSetting are the session settings
	// the trigger reads initiator_type and initiator_id from
	// (current_setting(name, true)); defaults "warren.initiator_type" and
	// "warren.initiator_id". An unset or empty initiator type is "USER".
	// Plane's code sets "plane.initiator_type".
	InitiatorTypeSetting, InitiatorIDSetting string

	// OnFailure is the failure policy; default Fail.
	OnFailure FailurePolicy

	// Subscriber says what a logical replication worker's writes do;
	// default SubscriberRefuse. Every other session, including one that
	// sets session_replication_role = replica, writes its events.
	Subscriber SubscriberPolicy

	// Outbox is the outbox table the events go to; default
	// outbox.DefaultTable. It must exist (warren outbox migrate).
	Outbox string

	// Version, when set, is each event's version field.
	Version string

	// LockTimeout is how long Install waits for a lock (the captured
	// table's, which every writer of the table then queues behind) before
	// it gives up, changing nothing; default outbox.DefaultLockTimeout.
	LockTimeout time.Duration

	// MoveOutbox lets Install change the outbox an installed capture of
	// the table writes to. Without it that is refused: the relay of the
	// old outbox would stop seeing the table's events without a word.
	MoveOutbox bool

	// The options below shape the events like another producer's; what
	// [Plane] sets reproduces Plane's issue triggers.

	// Ignore are tracked columns whose change alone writes no event:
	// they stay in data, and previous_attributes leaves them out. Plane
	// ignores updated_at, updated_by_id and last_activity_at, which
	// every save touches.
	Ignore []string

	// UpdateVerbs name the event of an update that changes a column:
	// with {Column: "state_id", Verb: "state.updated"} an update
	// changing state_id is workitem.state.updated. The first listed
	// column the update changed decides; an update changing none of
	// them is .updated.
	UpdateVerbs []ColumnVerb

	// CreatorColumn and ModifierColumn, when set, are where initiator_id
	// comes from: the new row's CreatorColumn for a .created event, the
	// new row's ModifierColumn for an update or a soft delete, the old
	// row's for a hard delete. Where that is NULL, InitiatorIDSetting.
	CreatorColumn, ModifierColumn string

	// Enrich adds to data, per row, arrays read from linked tables
	// (Plane's assignee_ids and label_ids).
	Enrich []Enrichment

	// Kind, when set, gives a row whose lookup says so another prefix
	// (Plane's epics: epic.created where the row's type is an epic),
	// and an update that moves a row between the two prefixes a
	// conversion event besides (workitem.converted.to_epic,
	// epic.converted.to_workitem).
	Kind *KindPrefix

	// Shape is the payloads' shape; default ShapeWarren.
	Shape PayloadShape

	// Verbs, when set, name the three row events instead of created,
	// updated and deleted: Plane's link tables write added, updated and
	// removed; its cycle memberships added, moved and removed.
	Verbs *RowVerbs

	// ChangedEntityType, when set, is the entity_type of every event but
	// .created: Plane's issue_links and issue_relations write issue_link
	// and issue_relation on insert, and issue after.
	ChangedEntityType string

	// PreviousRow makes an update's previous_attributes the whole old
	// row (its tracked columns, with their JSON types), not the old values
	// of the columns it changed: Plane's cycle and module memberships'
	// .moved.
	PreviousRow bool

	// Only, when set, limits the events to the rows whose column has the
	// value (compared as text): an insert or delete of such a row, an
	// update whose old or new version is one. Plane's file_assets holds
	// every kind of file, and its triggers write events for the
	// ISSUE_ATTACHMENT rows only. With Only, EntityIDColumn may be
	// nullable, and a row without an entity id meets no condition: it
	// names no entity to write an event about (a file not attached to
	// an issue). Setting its entity id later is the entity's .created.
	// Value is compared with the column's text form, which Generate
	// checks Value is (true, not t; 1, not 01).
	Only *ColumnValue

	// Parent, when set, is the entity the rows are about (Plane's issue
	// of a comment, a link or an assignee): EntityIDColumn holds its key,
	// Kind reads its column, and with As set, data is the parent's row
	// with the row itself under As; see [ParentOf].
	Parent *ParentOf

	// Link, when set, makes the table's rows links of Parent (Plane's
	// issue_assignees of issues), whose events they write instead of
	// their own; see [LinkOf].
	Link *LinkOf
}

// ParentOf is [Spec.Parent]: the row of Table whose KeyColumn equals the
// captured row's EntityIDColumn, which needs a unique index of its own,
// so that a row finds one parent at most. Its row is read whole, without
// Exclude, when the trigger fires. With As set, data is that row, Enrich's
// arrays (read for the parent), and the captured row under As; a .deleted
// event's data is the parent's without the row (Plane's comments). A
// missing parent makes data null, as Plane's lookup does.
type ParentOf struct {
	Table, KeyColumn string // the parent table and its key
	Exclude          []string
	As               string // the key of the row in data, "" for no nesting
}

// ColumnValue is [Spec.Only].
type ColumnValue struct{ Column, Value string }

// RowVerbs is [Spec.Verbs]. An empty field keeps its default.
type RowVerbs struct{ Created, Updated, Deleted string }

// LinkOf is [Spec.Link]; it needs [Spec.Parent], without As. An inserted
// row writes the parent's <prefix>.<Added> event; a soft delete of a live
// row, or a DELETE of one, its <prefix>.<Removed>; no other write of the
// table writes an event. data is the parent's row, with Enrich's arrays
// read for the parent when the statement ends (so after it: an added row
// is in them, a removed one is not); previous_attributes is {List: that
// array without the added row, or with the removed one}, where List names
// the Enrich entry that reads this table. The initiator is CreatorColumn
// of an added row, ModifierColumn of a removed one.
type LinkOf struct {
	Added, Removed string // the verbs: "assignee.added", "assignee.removed"
	List           string // the Enrich key of this table's array
}

// ColumnVerb is one of [Spec.UpdateVerbs].
type ColumnVerb struct {
	Column string // a tracked column
	Verb   string // the event type after the prefix's dot
}

// Enrichment is a JSON array added to each event's data under Key: the
// ValueColumn of the rows of Table whose LinkColumn equals the captured
// row's entity id, in OrderColumn's order when set, leaving out the rows
// whose LiveColumn, when set, is not NULL (soft deleted links). The array
// is read when the trigger fires, in the writing statement's snapshot.
// The writers of the captured table need SELECT on Table.
type Enrichment struct {
	Key                                              string
	Table                                            string // name or schema.name
	LinkColumn, ValueColumn, OrderColumn, LiveColumn string
}

// KindPrefix is [Spec.Kind]: a row is of the kind when the Table row
// whose KeyColumn equals the captured row's Column has FlagColumn (a
// boolean) true; its events then take Prefix instead of EventPrefix.
type KindPrefix struct {
	Column                string // of the captured table
	Table                 string // name or schema.name
	KeyColumn, FlagColumn string
	Prefix                string
}

// PayloadShape is how a payload's data and previous_attributes are
// written.
type PayloadShape string

const (
	// ShapeWarren: data is the row (the old row for a delete);
	// previous_attributes holds an update's changed columns' old values
	// with their JSON types, and is null for .created and .deleted.
	ShapeWarren PayloadShape = "warren"
	// ShapePlane is what Plane's triggers write: .created has the JSON
	// string "{}" for previous_attributes; .deleted has the JSON string
	// "{}" for data and the old row in previous_attributes; an update's
	// old values are their text forms (null stays null).
	ShapePlane PayloadShape = "plane"
)

// ErrInvalidSpec is wrapped by the errors that say a Spec cannot be
// generated: a bad name, an unknown column, a table without a usable key.
var ErrInvalidSpec = errors.New("invalid capture spec")

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidSpec, fmt.Sprintf(format, args...))
}

var (
	identRE   = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)
	settingRE = regexp.MustCompile(`^[a-z_][a-z0-9_]*\.[a-z_][a-z0-9_]*$`)
)

// functionSuffix names the trigger function after the table.
const functionSuffix = "_warren_capture"

// maxTableLen keeps the function's name within Postgres's 63 bytes.
const maxTableLen = 63 - len(functionSuffix)

// withDefaults validates what can be checked without the catalog and fills
// the defaults that do not need it.
func (s Spec) withDefaults() (Spec, error) {
	schema, table, qualified := strings.Cut(s.Table, ".")
	if !qualified {
		schema, table = "", s.Table
	}
	switch {
	case s.Table == "":
		return s, invalidf("Table is required")
	case qualified && !identRE.MatchString(schema), !identRE.MatchString(table):
		return s, invalidf("table %q must be name or schema.name, each matching %s", s.Table, identRE)
	case len(table) > maxTableLen:
		return s, invalidf("table name %q is longer than %d bytes, which leaves no room for its trigger function's name", table, maxTableLen)
	}
	if s.EntityType == "" {
		s.EntityType = table
	}
	if s.EventPrefix == "" {
		s.EventPrefix = s.EntityType
	}
	// In this order, so the error names the field that was given: an
	// EventPrefix defaulted from a bad EntityType is bad too.
	for _, f := range [...]struct{ name, v string }{{"EntityType", s.EntityType}, {"EventPrefix", s.EventPrefix}, {"Version", s.Version}} {
		if err := plainText(f.name, f.v); err != nil {
			return s, err
		}
	}
	if len(s.EventPrefix)+len(".created") > 255 {
		return s, invalidf("EventPrefix is %d bytes; event types must fit AMQP's 255", len(s.EventPrefix))
	}
	s.InitiatorTypeSetting = orDefault(s.InitiatorTypeSetting, DefaultInitiatorTypeSetting)
	s.InitiatorIDSetting = orDefault(s.InitiatorIDSetting, DefaultInitiatorIDSetting)
	for _, setting := range []string{s.InitiatorTypeSetting, s.InitiatorIDSetting} {
		if !settingRE.MatchString(setting) {
			return s, invalidf("setting %q must be a custom setting, prefix.name, matching %s", setting, settingRE)
		}
	}
	switch s.OnFailure {
	case "":
		s.OnFailure = Fail
	case Fail, Record:
	default:
		return s, invalidf("OnFailure must be %q or %q, not %q", Fail, Record, s.OnFailure)
	}
	switch s.Subscriber {
	case "":
		s.Subscriber = SubscriberRefuse
	case SubscriberRefuse, SubscriberCapture, SubscriberSkip:
	default:
		return s, invalidf("Subscriber must be %q, %q or %q, not %q", SubscriberRefuse, SubscriberCapture, SubscriberSkip, s.Subscriber)
	}
	if err := s.validShaping(); err != nil {
		return s, err
	}
	if s.NoSoftDelete && s.SoftDeleteColumn != "" {
		return s, invalidf("SoftDeleteColumn %q and NoSoftDelete exclude each other", s.SoftDeleteColumn)
	}
	if s.Outbox == "" {
		s.Outbox = outbox.DefaultTable
	}
	return s, nil
}

// plainText refuses what does not belong in an event's envelope field: a
// control character or white space at either end (warren.Event.Validate
// refuses those in event types), and text that is not UTF-8. Whatever
// it lets through reaches the SQL only as a quoted literal.
func plainText(field, v string) error {
	if strings.TrimSpace(v) != v {
		return invalidf("%s %q has leading or trailing white space", field, v)
	}
	if !utf8.ValidString(v) {
		return invalidf("%s %q is not UTF-8", field, v)
	}
	for _, r := range v {
		if unicode.IsControl(r) {
			return invalidf("%s %q contains a control character", field, v)
		}
	}
	return nil
}

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// validShaping checks the shaping options' names and verbs, before the
// catalog says whether the columns and tables exist.
func (s *Spec) validShaping() error {
	switch s.Shape {
	case "":
		s.Shape = ShapeWarren
	case ShapeWarren, ShapePlane:
	default:
		return invalidf("Shape must be %q or %q, not %q", ShapeWarren, ShapePlane, s.Shape)
	}
	prefixes := []string{s.EventPrefix}
	if k := s.Kind; k != nil {
		if err := plainText("Kind.Prefix", k.Prefix); err != nil {
			return err
		}
		if k.Prefix == "" || k.Prefix == s.EventPrefix {
			return invalidf("Kind.Prefix %q must be set and differ from EventPrefix", k.Prefix)
		}
		prefixes = append(prefixes, k.Prefix)
		if err := identifiers("Kind", k.Column, k.KeyColumn, k.FlagColumn); err != nil {
			return err
		}
		if err := tableName("Kind.Table", k.Table); err != nil {
			return err
		}
	}
	// The longest event type: a prefix and its longest verb, or a
	// conversion between the two prefixes.
	verb := len("created")
	for _, v := range s.UpdateVerbs {
		if err := identifiers("UpdateVerbs", v.Column); err != nil {
			return err
		}
		if err := plainText("UpdateVerbs verb", v.Verb); err != nil {
			return err
		}
		if v.Verb == "" {
			return invalidf("UpdateVerbs: the verb of column %q is empty", v.Column)
		}
		verb = max(verb, len(v.Verb))
	}
	if v := s.Verbs; v != nil {
		for _, name := range []string{v.Created, v.Updated, v.Deleted} {
			if err := plainText("Verbs", name); err != nil {
				return err
			}
			verb = max(verb, len(name))
		}
	}
	if err := plainText("ChangedEntityType", s.ChangedEntityType); err != nil {
		return err
	}
	if o := s.Only; o != nil {
		if o.Column == "" {
			return invalidf("Only: Column is required")
		}
		if err := identifiers("Only", o.Column); err != nil {
			return err
		}
		if !utf8.ValidString(o.Value) || strings.ContainsRune(o.Value, 0) {
			return invalidf("Only: value %q is not UTF-8 without NUL, as Postgres text is", o.Value)
		}
	}
	if p := s.Parent; p != nil {
		if err := tableName("Parent.Table", p.Table); err != nil {
			return err
		}
		if p.KeyColumn == "" {
			return invalidf("Parent: KeyColumn is required")
		}
		if err := identifiers("Parent", append([]string{p.KeyColumn}, p.Exclude...)...); err != nil {
			return err
		}
		if err := plainText("Parent.As", p.As); err != nil {
			return err
		}
	}
	if l := s.Link; l != nil {
		if s.Parent == nil || s.Parent.As != "" {
			return invalidf("Link: needs Parent, without As: a link's events carry the parent's row")
		}
		if s.Verbs != nil || s.ChangedEntityType != "" || s.PreviousRow || s.Only != nil {
			return invalidf("Link: writes Added and Removed only; Verbs, ChangedEntityType, PreviousRow and Only mean nothing with it")
		}
		for _, v := range []string{l.Added, l.Removed} {
			if err := plainText("Link verb", v); err != nil {
				return err
			}
			if v == "" {
				return invalidf("Link: Added and Removed are required")
			}
			verb = max(verb, len(v))
		}
	}
	longest := len(slices.MaxFunc(prefixes, func(a, b string) int { return len(a) - len(b) })) + 1 + verb
	if len(prefixes) == 2 {
		longest = max(longest, len(prefixes[0])+len(".converted.to_")+len(prefixes[1]))
	}
	if longest > 255 {
		return invalidf("the longest event type these prefixes and verbs make is %d bytes, past AMQP's 255", longest)
	}
	if err := identifiers("CreatorColumn/ModifierColumn", s.CreatorColumn, s.ModifierColumn); err != nil {
		return err
	}
	// A copy: the caller's RowVerbs stays as given.
	verbs := RowVerbs{}
	if s.Verbs != nil {
		verbs = *s.Verbs
	}
	verbs.Created, verbs.Updated, verbs.Deleted = orDefault(verbs.Created, "created"), orDefault(verbs.Updated, "updated"), orDefault(verbs.Deleted, "deleted")
	s.Verbs = &verbs
	keys := map[string]bool{}
	for _, e := range s.Enrich {
		if err := plainText("Enrich.Key", e.Key); err != nil {
			return err
		}
		if e.Key == "" || keys[e.Key] {
			return invalidf("Enrich: key %q is empty or given twice", e.Key)
		}
		keys[e.Key] = true
		if err := tableName("Enrich.Table", e.Table); err != nil {
			return err
		}
		if e.LinkColumn == "" || e.ValueColumn == "" {
			return invalidf("Enrich %q: LinkColumn and ValueColumn are required", e.Key)
		}
		if err := identifiers("Enrich "+e.Key, e.LinkColumn, e.ValueColumn, e.OrderColumn, e.LiveColumn); err != nil {
			return err
		}
	}
	return nil
}

// identifiers refuses a non-empty name that is not a lower-case unquoted
// identifier; the catalog then says whether it exists.
func identifiers(field string, names ...string) error {
	for _, n := range names {
		if n != "" && !identRE.MatchString(n) {
			return invalidf("%s: column %q must match %s", field, n, identRE)
		}
	}
	return nil
}

// tableName refuses what is not "name" or "schema.name".
func tableName(field, name string) error {
	schema, table, qualified := strings.Cut(name, ".")
	if !qualified {
		schema, table = "", name
	}
	if (qualified && !identRE.MatchString(schema)) || !identRE.MatchString(table) {
		return invalidf("%s %q must be name or schema.name, each matching %s", field, name, identRE)
	}
	return nil
}
