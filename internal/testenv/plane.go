package testenv

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"reflect"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/warrenmq/warren/outbox"
)

// PlaneTable is a test's own copy of Plane's outbox table, made with
// Plane's DDL and dropped (with warren's migration record) when the test
// ends: what the Plane-schema tests of the relay, the outbox and the
// command drain.
type PlaneTable struct {
	t    testing.TB
	Pool *pgxpool.Pool
	Name string
}

// planeDDL is Plane's outbox table (event_stream/models/outbox.py, as
// Django creates it) and its two partial indexes, with {ts} the type
// Django gives its DateTimeFields: timestamp without time zone, or
// timestamptz under USE_TZ. The index names carry the test's table name
// so that tests do not collide; their columns and predicates are Plane's.
const planeDDL = `
CREATE TABLE {table} (
    id             bigserial    PRIMARY KEY,
    event_id       uuid         NOT NULL UNIQUE,
    event_type     varchar(255) NOT NULL,
    entity_type    varchar(255) NOT NULL,
    entity_id      uuid         NOT NULL,
    payload        jsonb        NOT NULL,
    workspace_id   uuid         NOT NULL,
    project_id     uuid         NULL,
    initiator_id   uuid         NULL,
    initiator_type varchar(255) NOT NULL DEFAULT 'USER',
    created_at     {ts}         NOT NULL DEFAULT now(),
    claimed_at     {ts}         NULL,
    processed_at   {ts}         NULL
);
CREATE INDEX {table_unclaimed_unprocessed} ON {table} (claimed_at, processed_at, id)
    WHERE claimed_at IS NULL AND processed_at IS NULL;
CREATE INDEX {table_processed_idx} ON {table} (processed_at) WHERE processed_at IS NOT NULL`

// NewPlaneTable makes Plane's outbox table for t, its timestamps
// timestamptz when withTimeZone is set and timestamp otherwise.
func NewPlaneTable(t testing.TB, withTimeZone bool) *PlaneTable {
	t.Helper()
	name := Name(t, "plane")
	DropTables(t, name, name+"_warren_migrations")
	p := &PlaneTable{t: t, Pool: PgPool(t), Name: name}
	ts := "timestamp"
	if withTimeZone {
		ts = "timestamptz"
	}
	p.Exec(strings.ReplaceAll(planeDDL, "{ts}", ts))
	return p
}

// Outbox returns warren's view of the table, with opts (Schema is set to
// SchemaPlane).
func (p *PlaneTable) Outbox(opts outbox.Options) *outbox.Table {
	p.t.Helper()
	opts.Schema = outbox.SchemaPlane
	ob, err := outbox.Open(p.Name, opts)
	if err != nil {
		p.t.Fatal(err)
	}
	return ob
}

// planeInsert is the insert of Plane's triggers: every column named, the
// initiator type from the session's plane.initiator_type, duplicates of
// an event_id skipped. $1 is how many events to write, $2 the payload's
// data; each gets a random event_id and entity_id.
const planeInsert = `
INSERT INTO {table} (event_id, event_type, entity_type, entity_id, payload, workspace_id, project_id,
	initiator_id, initiator_type, created_at)
SELECT gen_random_uuid(), 'workitem.updated', 'issue', gen_random_uuid(),
	jsonb_build_object('data', $2::jsonb, 'previous_attributes', jsonb_build_object('name', 'old')),
	'11111111-1111-1111-1111-111111111111', '22222222-2222-2222-2222-222222222222', NULL,
	coalesce(nullif(current_setting('plane.initiator_type', true), ''), 'USER'), NOW()
FROM generate_series(1, $1)
ON CONFLICT (event_id) DO NOTHING
RETURNING event_id::text`

// Insert writes n events in one committed transaction, as Plane's
// triggers do, and returns their event ids.
func (p *PlaneTable) Insert(n int) []string {
	p.t.Helper()
	return p.InsertData(n, `{"name":"x"}`)
}

// InsertData is Insert with the payload's data given.
func (p *PlaneTable) InsertData(n int, data string) []string {
	p.t.Helper()
	ids, err := p.TryInsertData(context.Background(), n, data)
	if err != nil {
		p.t.Fatal(err)
	}
	return ids
}

// TryInsertData is InsertData returning its error, for goroutines.
func (p *PlaneTable) TryInsertData(ctx context.Context, n int, data string) ([]string, error) {
	rows, err := p.Pool.Query(ctx, p.render(planeInsert), n, data)
	if err != nil {
		return nil, err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("insert into %s: %w", p.Name, err)
	}
	return ids, nil
}

// Count returns how many rows of the table match the SQL condition where.
func (p *PlaneTable) Count(where string, args ...any) int {
	p.t.Helper()
	var n int
	if err := p.Pool.QueryRow(context.Background(), p.render("SELECT count(*) FROM {table} WHERE "+where), args...).Scan(&n); err != nil {
		p.t.Fatal(err)
	}
	return n
}

// Exec runs sql with {table} replaced by the quoted table name and
// {table_suffix} by the quoted name of an object named after it.
func (p *PlaneTable) Exec(sql string, args ...any) {
	p.t.Helper()
	if _, err := p.Pool.Exec(context.Background(), p.render(sql), args...); err != nil {
		p.t.Fatal(err)
	}
}

func (p *PlaneTable) render(sql string) string {
	out := sql
	for {
		i := strings.Index(out, "{table")
		if i < 0 {
			return out
		}
		j := strings.Index(out[i:], "}")
		suffix := out[i+len("{table") : i+j]
		out = out[:i] + pgx.Identifier{p.Name + suffix}.Sanitize() + out[i+j+1:]
	}
}

// PythonWithPika returns Debian's python3, which python3-pika installs
// into (not a pyenv python3 first on PATH), for the tests that run
// Plane's kind of client; it fails t, saying how to install pika, when
// that interpreter cannot import it.
func PythonWithPika(t testing.TB) string {
	t.Helper()
	RequireServices(t, "python3 with pika")
	const python = "/usr/bin/python3"
	if out, err := exec.Command(python, "-c", "import pika").CombinedOutput(); err != nil {
		t.Fatalf("%s cannot import pika (%v: %s): run scripts/services.sh, which installs Debian's python3-pika", python, err, bytes.TrimSpace(out))
	}
	return python
}

// CheckPlaneConsumerRead compares what relay/testdata/plane_consumer.py
// printed (one JSON object a message) with want, keyed by event_id, and
// fails t for every message read differently, and for every one not read.
// Numbers are kept as json.Number, so an integer field stays exact.
func CheckPlaneConsumerRead(t testing.TB, out []byte, want map[string]map[string]any) {
	t.Helper()
	lines := bufio.NewScanner(bytes.NewReader(out))
	for lines.Scan() {
		dec := json.NewDecoder(bytes.NewReader(lines.Bytes()))
		dec.UseNumber()
		var got map[string]any
		if err := dec.Decode(&got); err != nil {
			t.Fatalf("%v: %s", err, lines.Bytes())
		}
		id, _ := got["event_id"].(string)
		if !reflect.DeepEqual(got, want[id]) {
			t.Errorf("Plane's consumer read\n %v\nwant\n %v", got, want[id])
		}
		delete(want, id)
	}
	if len(want) > 0 {
		t.Errorf("not read by Plane's consumer: %v\n%s", want, out)
	}
}

// PlaneSchemaDDL is Plane's issues table as its current migrations leave
// it (the columns Plane's triggers treat apart, and one of each type its
// rows hold), with the tables its issue triggers read (issue_types,
// issue_assignees and issue_labels), its states and labels tables, and the
// tables of what an issue has: comments, links, relations, attachments
// (file_assets), and cycle and module memberships.
// Unqualified: run it with the schema it goes to first on the search_path.
const PlaneSchemaDDL = `
CREATE TABLE issue_types (id uuid PRIMARY KEY, name text NOT NULL, is_epic boolean NOT NULL DEFAULT false);
CREATE TABLE issues (
	id uuid PRIMARY KEY,
	name varchar(255) NOT NULL,
	description_json jsonb NOT NULL DEFAULT '{}',
	description_html text NOT NULL DEFAULT '<p></p>',
	description_binary bytea,
	description_stripped text,
	priority varchar(30) NOT NULL DEFAULT 'none',
	state_id uuid,
	type_id uuid REFERENCES issue_types,
	parent_id uuid,
	sequence_id integer NOT NULL DEFAULT 1,
	sort_order double precision NOT NULL DEFAULT 65535,
	start_date date,
	is_draft boolean NOT NULL DEFAULT false,
	archived_at date,
	external_source varchar(255),
	workspace_id uuid NOT NULL,
	project_id uuid NOT NULL,
	created_by_id uuid,
	updated_by_id uuid,
	created_at timestamptz NOT NULL DEFAULT now(),
	updated_at timestamptz NOT NULL DEFAULT now(),
	last_activity_at timestamptz,
	deleted_at timestamptz);
CREATE TABLE issue_assignees (id uuid PRIMARY KEY, issue_id uuid NOT NULL, assignee_id uuid NOT NULL,
	workspace_id uuid NOT NULL, project_id uuid NOT NULL, created_at timestamptz NOT NULL, deleted_at timestamptz,
	created_by_id uuid, updated_by_id uuid, updated_at timestamptz NOT NULL DEFAULT now());
CREATE INDEX ON issue_assignees (issue_id);
CREATE TABLE issue_labels (id uuid PRIMARY KEY, issue_id uuid NOT NULL, label_id uuid NOT NULL,
	workspace_id uuid NOT NULL, project_id uuid NOT NULL, created_at timestamptz NOT NULL, deleted_at timestamptz,
	created_by_id uuid, updated_by_id uuid, updated_at timestamptz NOT NULL DEFAULT now());
CREATE INDEX ON issue_labels (issue_id);
CREATE TABLE states (
	id uuid PRIMARY KEY, name varchar(255) NOT NULL, description text NOT NULL DEFAULT '', color varchar(255) NOT NULL,
	slug varchar(100) NOT NULL DEFAULT '', sequence double precision NOT NULL DEFAULT 65535, "group" varchar(20) NOT NULL DEFAULT 'backlog',
	"default" boolean NOT NULL DEFAULT false, external_source varchar(255), external_id varchar(255),
	workspace_id uuid NOT NULL, project_id uuid NOT NULL, created_by_id uuid, updated_by_id uuid,
	created_at timestamptz NOT NULL DEFAULT now(), updated_at timestamptz NOT NULL DEFAULT now(), deleted_at timestamptz);
CREATE TABLE labels (
	id uuid PRIMARY KEY, name varchar(255) NOT NULL, description text NOT NULL DEFAULT '', color varchar(255) NOT NULL DEFAULT '',
	sort_order double precision NOT NULL DEFAULT 65535, parent_id uuid REFERENCES labels,
	external_source varchar(255), external_id varchar(255),
	workspace_id uuid NOT NULL, project_id uuid, created_by_id uuid, updated_by_id uuid,
	created_at timestamptz NOT NULL DEFAULT now(), updated_at timestamptz NOT NULL DEFAULT now(), deleted_at timestamptz);
CREATE TABLE issue_comments (
	id uuid PRIMARY KEY, comment_stripped text NOT NULL DEFAULT '', comment_json jsonb NOT NULL DEFAULT '{}',
	comment_html text NOT NULL DEFAULT '<p></p>', attachments varchar(200)[] NOT NULL DEFAULT '{}', access varchar(100) NOT NULL DEFAULT 'INTERNAL',
	issue_id uuid NOT NULL, actor_id uuid, edited_at timestamptz, external_source varchar(255), external_id varchar(255),
	workspace_id uuid NOT NULL, project_id uuid NOT NULL, created_by_id uuid, updated_by_id uuid,
	created_at timestamptz NOT NULL DEFAULT now(), updated_at timestamptz NOT NULL DEFAULT now(), deleted_at timestamptz);
CREATE TABLE issue_links (
	id uuid PRIMARY KEY, title varchar(255), url text NOT NULL, metadata jsonb NOT NULL DEFAULT '{}', issue_id uuid NOT NULL,
	workspace_id uuid NOT NULL, project_id uuid NOT NULL, created_by_id uuid, updated_by_id uuid,
	created_at timestamptz NOT NULL DEFAULT now(), updated_at timestamptz NOT NULL DEFAULT now(), deleted_at timestamptz);
CREATE TABLE issue_relations (
	id uuid PRIMARY KEY, issue_id uuid NOT NULL, related_issue_id uuid NOT NULL, relation_type varchar(20) NOT NULL DEFAULT 'blocked_by',
	workspace_id uuid NOT NULL, project_id uuid NOT NULL, created_by_id uuid, updated_by_id uuid,
	created_at timestamptz NOT NULL DEFAULT now(), updated_at timestamptz NOT NULL DEFAULT now(), deleted_at timestamptz);
CREATE TABLE file_assets (
	id uuid PRIMARY KEY, attributes jsonb NOT NULL DEFAULT '{}', asset varchar(800) NOT NULL, entity_type varchar(255),
	entity_identifier varchar(255), is_uploaded boolean NOT NULL DEFAULT false, size double precision NOT NULL DEFAULT 0,
	storage_metadata jsonb, issue_id uuid, comment_id uuid, user_id uuid,
	workspace_id uuid, project_id uuid, created_by_id uuid, updated_by_id uuid,
	created_at timestamptz NOT NULL DEFAULT now(), updated_at timestamptz NOT NULL DEFAULT now(), deleted_at timestamptz);
CREATE TABLE cycle_issues (
	id uuid PRIMARY KEY, cycle_id uuid NOT NULL, issue_id uuid NOT NULL,
	workspace_id uuid NOT NULL, project_id uuid NOT NULL, created_by_id uuid, updated_by_id uuid,
	created_at timestamptz NOT NULL DEFAULT now(), updated_at timestamptz NOT NULL DEFAULT now(), deleted_at timestamptz);
CREATE TABLE module_issues (
	id uuid PRIMARY KEY, module_id uuid NOT NULL, issue_id uuid NOT NULL,
	workspace_id uuid NOT NULL, project_id uuid NOT NULL, created_by_id uuid, updated_by_id uuid,
	created_at timestamptz NOT NULL DEFAULT now(), updated_at timestamptz NOT NULL DEFAULT now(), deleted_at timestamptz);
`
