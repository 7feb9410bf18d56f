package planeinterop_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/consumer"
	dedupredis "github.com/warrenmq/warren/dedup/redis"
	"github.com/warrenmq/warren/dlq"
	"github.com/warrenmq/warren/examples/app"
	"github.com/warrenmq/warren/examples/automation"
	"github.com/warrenmq/warren/examples/pipeline"
	"github.com/warrenmq/warren/examples/webhook"
	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/warrenprom"
)

// The AMQP properties plane_publisher.py puts on a message.
const (
	propsPlane = "plane" // Plane's: persistent, application/json, content encoding utf-8, timestamp
	propsFull  = "full"  // warren relay's: persistent, application/json, message_id, type, timestamp, initiator header
	propsNone  = "none"  // none at all: not even persistent
)

// planeBodyKeys are the keys of the body Plane's publisher writes, in its
// order (publisher.py's own fields, then OutboxEvent.to_publisher_format).
var planeBodyKeys = []string{"timestamp", "publisher", "publisher_instance", "version", "source", "outbox_id",
	"event_id", "event_type", "entity_type", "entity_id", "payload", "workspace_id", "project_id", "initiator_id", "initiator_type"}

// planeMessage is one input line of plane_publisher.py: an outbox row.
type planeMessage struct {
	Properties string         `json:"properties"`
	OutboxID   int64          `json:"outbox_id"`
	Event      map[string]any `json:"event"`
}

// publishAsPlane runs plane_publisher.py and returns the exact body of each
// message it published, in the order of msgs.
func publishAsPlane(t *testing.T, amqpURL, exchange string, msgs []planeMessage) []string {
	t.Helper()
	var in bytes.Buffer
	for _, m := range msgs {
		line, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		in.Write(append(line, '\n'))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, testenv.PythonWithPika(t), "testdata/plane_publisher.py", amqpURL, exchange)
	cmd.Stdin = &in
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("plane_publisher.py: %v\n%s%s", err, out, stderr.Bytes())
	}
	var bodies []string
	lines := bufio.NewScanner(bytes.NewReader(out))
	for lines.Scan() {
		var p struct{ Properties, Body string }
		if err := json.Unmarshal(lines.Bytes(), &p); err != nil {
			t.Fatalf("plane_publisher.py printed %q: %v", lines.Bytes(), err)
		}
		if want := msgs[len(bodies)].Properties; p.Properties != want {
			t.Fatalf("plane_publisher.py published message %d with properties %q, want %q", len(bodies), p.Properties, want)
		}
		bodies = append(bodies, p.Body)
	}
	if len(bodies) != len(msgs) {
		t.Fatalf("plane_publisher.py published %d of %d messages\n%s", len(bodies), len(msgs), stderr.Bytes())
	}
	return bodies
}

// receiver is the webhook's endpoint: it verifies each delivery as a real
// receiver would and records it; the first POST of an id in failOnce is
// answered 503.
type receiver struct {
	secret []byte

	mu       sync.Mutex
	failOnce map[string]bool
	posts    map[string]int        // event id header → POSTs
	accepted map[string][]delivery // event id header → 2xx answers
	forged   []string
}

type delivery struct {
	eventType string // the X-Warren-Event-Type header
	body      string
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := webhook.Verify(r.secret, req.Header, body, 5*time.Minute, time.Now()); err != nil {
		r.forged = append(r.forged, err.Error())
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	id := req.Header.Get(webhook.HeaderEventID)
	r.posts[id]++
	if r.failOnce[id] && r.posts[id] == 1 {
		http.Error(w, "try again", http.StatusServiceUnavailable)
		return
	}
	r.accepted[id] = append(r.accepted[id], delivery{eventType: req.Header.Get(webhook.HeaderEventType), body: string(body)})
}

// failFirst makes the first POST of id fail.
func (r *receiver) failFirst(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failOnce[id] = true
}

func (r *receiver) snapshot() (posts map[string]int, accepted map[string][]delivery, forged []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.posts), maps.Clone(r.accepted), slices.Clone(r.forged)
}

// logLines is a consumer log kept for the test to read, and shown with it.
type logLines struct {
	mu  sync.Mutex
	buf bytes.Buffer
	out io.Writer
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf.Write(p)
	return l.out.Write(p)
}

func (l *logLines) lines(containing string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for line := range strings.Lines(l.buf.String()) {
		if strings.Contains(line, containing) {
			out = append(out, line)
		}
	}
	return out
}

// planeCase is one kind of message Plane's publisher sends, and what the
// example consumers must do with it. The webhook delivers every event
// that decodes: it has no filter.
type planeCase struct {
	name     string
	event    func(t *testing.T, itemID string) map[string]any
	ruleRuns int  // the automation's "done → priority none" rule fires
	dead     bool // both consumers dead-letter it, undecodable
	// unknownItem: the work item is not in the automation's table (an
	// issue of Plane's the example does not hold); the rule skips it.
	unknownItem bool
}

// createItem puts c's work item into the application's table, in state
// todoState, unless c says the table does not hold it.
func (e *examples) createItem(ctx context.Context, tx pgx.Tx, c planeCase, itemID string) error {
	if c.unknownItem {
		return nil
	}
	_, err := e.items.Create(ctx, tx, app.Actor{ID: user, Type: warren.InitiatorUser},
		app.WorkItem{ID: itemID, WorkspaceID: workspace, ProjectID: project, Name: "Plane item", StateID: todoState, Priority: "urgent"})
	return err
}

// Ids in Plane's shape (UUIDs) for the events' workspace, project and
// user, and the two states of the work items: every item starts in
// todoState, and the rule fires on a change to doneState.
const (
	workspace, project, user = "0b0b0b0b-0000-4000-8000-00000000000a", "0b0b0b0b-0000-4000-8000-00000000000b", "0b0b0b0b-0000-4000-8000-00000000000c"
	todoState, doneState     = "0b0b0b0b-0000-4000-8000-0000000000d0", "0b0b0b0b-0000-4000-8000-0000000000d1"
)

// planeIssueSQL is a row of Plane's issues table with the column types of
// its schema ($1 the id, $2 the state), for the payload queries below.
const planeIssueSQL = `SELECT $1::uuid AS id, '` + workspace + `'::uuid AS workspace_id, '` + project + `'::uuid AS project_id,
	'Plane item'::varchar(255) AS name, '<p>secret</p>'::text AS description_html, '{}'::jsonb AS description_json,
	$2::uuid AS state_id, 'urgent'::varchar(30) AS priority, 42 AS sequence_id, 65535::float8 AS sort_order,
	false AS is_draft, NULL::date AS start_date, '2026-12-24'::date AS target_date, NULL::timestamptz AS completed_at,
	NULL::date AS archived_at, '2026-12-01 10:00:00.123456+00'::timestamptz AS created_at,
	'2026-12-06 09:30:00.5+00'::timestamptz AS updated_at, NULL::timestamptz AS deleted_at,
	'` + user + `'::uuid AS created_by_id, '` + user + `'::uuid AS updated_by_id, NULL::uuid AS parent_id, NULL::uuid AS type_id`

// planeData is what Plane's issue triggers put in data: the row as
// to_jsonb makes it, without the description columns, with the item's
// assignee_ids and label_ids added.
const planeData = `(to_jsonb(r) - 'description_html' - 'description_binary' - 'description' - 'description_stripped')
	|| jsonb_build_object('assignee_ids', jsonb_build_array(r.created_by_id), 'label_ids', '[]'::jsonb)`

// planePayloads are the payloads Plane's triggers write, by the event
// they write them for, as PostgreSQL builds them from the triggers' own
// expressions (read from apps/api/plane/event_stream/models/issue.py and
// label.py). That is what makes them exact: an untyped '{}' literal given
// to jsonb_build_object comes out as the JSON string "{}", and an update's
// old values come out as text, NULL as null.
var planePayloads = map[string]string{
	"created": `jsonb_build_object('data', ` + planeData + `, 'previous_attributes', '{}')`,
	// A state change: Plane's update trigger records every changed column
	// but updated_at and updated_by_id; moving an item to another state
	// also set completed_at, which was NULL.
	"state": `jsonb_build_object('data', ` + planeData + `, 'previous_attributes',
		jsonb_build_object('state_id', '` + todoState + `'::uuid::text, 'completed_at', NULL::text))`,
	"updated": `jsonb_build_object('data', ` + planeData + `, 'previous_attributes',
		jsonb_build_object('priority', 'none'::text, 'sort_order', (12345::float8)::text, 'sequence_id', 41::text,
			'is_draft', true::text, 'target_date', NULL::text))`,
	// A soft delete: data is "{}" and the old row is in previous_attributes.
	"deleted": `jsonb_build_object('data', '{}', 'previous_attributes', to_jsonb(r) - 'description_html' - 'description_binary' - 'description' - 'description_stripped')`,
}

// planePayload returns the payload Plane's trigger writes for an event of
// kind on the work item itemID, now in state, decoded as the test's
// events are (numbers kept as written).
func planePayload(t *testing.T, kind, itemID, state string) any {
	t.Helper()
	var raw []byte
	err := testenv.PgPool(t).QueryRow(context.Background(),
		`SELECT (`+planePayloads[kind]+`)::text FROM (`+planeIssueSQL+`) r`, itemID, state).Scan(&raw)
	if err != nil {
		t.Fatalf("build Plane's %s payload: %v", kind, err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var payload any
	if err := dec.Decode(&payload); err != nil {
		t.Fatal(err)
	}
	return payload
}

func planeCases() []planeCase {
	workItemEvent := func(t *testing.T, typ, kind, initiatorType, itemID, state string) map[string]any {
		ev := map[string]any{
			"event_id": app.NewID(), "event_type": typ, "entity_type": "issue", "entity_id": itemID,
			"workspace_id": workspace, "project_id": project, "initiator_id": user, "initiator_type": initiatorType,
			"payload": planePayload(t, kind, itemID, state),
		}
		if initiatorType != warren.InitiatorUser {
			ev["initiator_id"] = nil // a system actor has no user id in Plane
		}
		return ev
	}
	// Plane writes a NULL initiator_id as the string "None" (str(None)):
	// initiator_type alone says whether a system did it.
	withoutInitiator := func(ev map[string]any) map[string]any {
		ev["initiator_id"] = nil
		return ev
	}
	return []planeCase{
		{name: "a user moves a work item to done", ruleRuns: 1, event: func(t *testing.T, itemID string) map[string]any {
			return workItemEvent(t, "workitem.state.updated", "state", warren.InitiatorUser, itemID, doneState)
		}},
		{name: "a user's state change without an initiator id", ruleRuns: 1, event: func(t *testing.T, itemID string) map[string]any {
			return withoutInitiator(workItemEvent(t, "workitem.state.updated", "state", warren.InitiatorUser, itemID, doneState))
		}},
		{name: "a user moves an issue the example does not hold to done", unknownItem: true, event: func(t *testing.T, itemID string) map[string]any {
			return workItemEvent(t, "workitem.state.updated", "state", warren.InitiatorUser, itemID, doneState)
		}},
		{name: "an import moves a work item to done", event: func(t *testing.T, itemID string) map[string]any {
			return workItemEvent(t, "workitem.state.updated", "state", warren.InitiatorSystemImport, itemID, doneState)
		}},
		{name: "a user creates a work item", event: func(t *testing.T, itemID string) map[string]any {
			return workItemEvent(t, "workitem.created", "created", warren.InitiatorUser, itemID, todoState)
		}},
		{name: "a user changes other fields of a done work item", event: func(t *testing.T, itemID string) map[string]any {
			return workItemEvent(t, "workitem.updated", "updated", warren.InitiatorUser, itemID, doneState)
		}},
		{name: "a user deletes a work item", event: func(t *testing.T, itemID string) map[string]any {
			return workItemEvent(t, "workitem.deleted", "deleted", warren.InitiatorUser, itemID, todoState)
		}},
		{name: "a workspace label", event: func(*testing.T, string) map[string]any {
			// label.py: the label's columns as data, '{}' as
			// previous_attributes, a NULL project for a workspace label.
			return map[string]any{
				"event_id": app.NewID(), "event_type": "label.created", "entity_type": "label", "entity_id": app.NewID(),
				"workspace_id": workspace, "project_id": nil, "initiator_id": user, "initiator_type": warren.InitiatorUser,
				"payload": map[string]any{"data": map[string]any{"name": "bug", "color": "#ff0000", "project_id": nil}, "previous_attributes": "{}"},
			}
		}},
		{name: "no event_id", dead: true, event: func(t *testing.T, itemID string) map[string]any {
			ev := workItemEvent(t, "workitem.updated", "updated", warren.InitiatorUser, itemID, doneState)
			delete(ev, "event_id")
			return ev
		}},
	}
}

// examples are the webhook and automation services running on the real
// services, both bound to one fanout exchange, the webhook delivering to
// recv.
type examples struct {
	cfg   pipeline.Config // names and URLs; the pipeline itself is not started
	pool  *pgxpool.Pool
	items *app.App
	hook  *webhook.Service
	auto  *automation.Service
	// autoDedup has the automation's dedup store metrics (WrapStore).
	autoDedup *prometheus.Registry
	recv      *receiver
	logs      *logLines
}

// startExamples starts both services, consuming, with names of their own,
// and deletes everything they created when t ends. The automation has one
// rule: a work item set to done gets priority none.
func startExamples(t *testing.T) *examples { return startExamplesOn(t, false) }

// startExamplesOn is startExamples; with adopt, both consumers adopt queues
// declared first as Plane's consumers declare theirs (planeQueues).
func startExamplesOn(t *testing.T, adopt bool) *examples {
	t.Helper()
	var b [4]byte
	rand.Read(b[:])
	// Plane's exchange is plane.event_stream (a durable fanout, which is
	// also how the consumers declare theirs); each run has its own.
	e := &examples{cfg: pipeline.Config{
		AMQPURL:     testenv.AMQPURL(t),
		DatabaseURL: testenv.DatabaseURL(t),
		RedisURL:    testenv.RedisURL(t),
		Names:       pipeline.NamesWithPrefix("wt_plane_" + hex.EncodeToString(b[:])),
		RetryDelays: []time.Duration{200 * time.Millisecond},
	}}
	// Registered first, so it runs last: after the consumers stopped.
	t.Cleanup(func() {
		if err := pipeline.Destroy(context.Background(), e.cfg); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	ctx := context.Background()
	names := e.cfg.Names
	e.pool = testenv.PgPool(t)
	var err error
	if e.items, err = app.New(names.WorkItems, names.Outbox); err != nil {
		t.Fatal(err)
	}
	if err := e.items.Migrate(ctx, e.pool); err != nil {
		t.Fatal(err)
	}

	secret := []byte("plane-interop-secret")
	e.recv = &receiver{secret: secret, failOnce: map[string]bool{}, posts: map[string]int{}, accepted: map[string][]delivery{}}
	srv := httptest.NewServer(e.recv)
	t.Cleanup(srv.Close)
	e.logs = &logLines{out: t.Output()}
	consumerConfig := func(name string) consumer.Config {
		return consumer.Config{
			URL: e.cfg.AMQPURL, Name: name, Exchange: names.Exchange, RetryDelays: e.cfg.RetryDelays, AdoptQueue: adopt,
			Logger: slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelWarn})),
		}
	}
	if adopt {
		declarePlaneQueues(t, names.Exchange, names.WebhookQueue, names.AutomationQueue)
	}
	store, err := dedupredis.New(testenv.RedisClient(t, "plane-interop"), dedupredis.Config{Prefix: names.RedisPrefix})
	if err != nil {
		t.Fatal(err)
	}
	if e.hook, err = webhook.New(webhook.Config{
		Consumer:  consumerConfig(names.WebhookQueue),
		Endpoints: []webhook.Endpoint{{URL: srv.URL, Name: "test-receiver"}},
		Secret:    secret,
	}, store); err != nil {
		t.Fatal(err)
	}
	e.autoDedup = prometheus.NewRegistry()
	dedupMetrics, err := warrenprom.NewDedupMetrics(e.autoDedup, warrenprom.DedupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if e.auto, err = automation.New(automation.Config{
		Consumer:   consumerConfig(names.AutomationQueue),
		RulesTable: names.Rules, RunsTable: names.Runs, DedupTable: names.Dedup,
		WrapStore: dedupMetrics.Instrument,
	}, e.pool, e.items); err != nil {
		t.Fatal(err)
	}
	if err := e.auto.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := e.auto.AddRule(ctx, automation.Rule{Name: "done clears priority", WhenState: doneState, SetPriority: "none"}); err != nil {
		t.Fatal(err)
	}
	testenv.RunInBackground(t, e.hook.Run)
	testenv.RunInBackground(t, e.auto.Run)
	// Bound before anything is published: a fanout exchange drops what
	// reaches it with no queue bound.
	testenv.WaitFor(t, 30*time.Second, "both consumers to consume", func() bool {
		return e.hook.Health().Ready && e.auto.Health().Ready
	})
	return e
}

// tap binds a queue of the test's own to the exchange, to see what was
// put on the wire; it is deleted when t ends.
func (e *examples) tap(t *testing.T) (drain func() []amqp.Delivery) {
	t.Helper()
	conn := testenv.AMQPConn(t)
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	queue := e.cfg.Names.Exchange + ".tap"
	testenv.CleanupQueues(t, queue)
	if _, err := ch.QueueDeclare(queue, false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(queue, "", e.cfg.Names.Exchange, false, nil); err != nil {
		t.Fatal(err)
	}
	return func() []amqp.Delivery { return testenv.Drain(t, conn, queue) }
}

// settled is the part of Stats that counts what became of messages.
func settled(s consumer.Stats) consumer.Stats {
	return consumer.Stats{Received: s.Received, Done: s.Done, Skipped: s.Skipped, Duplicates: s.Duplicates,
		Retried: s.Retried, Deferred: s.Deferred, DeadLettered: s.DeadLettered, Requeued: s.Requeued}
}

// TestExamplesHandleWhatPlanePublishes runs the webhook and automation
// examples on the real services, bound to a fanout exchange that Plane's
// publisher (testdata/plane_publisher.py, with pika) feeds, and checks what
// each did with every message, sent with Plane's properties, with all of
// warren's and with none.
func TestExamplesHandleWhatPlanePublishes(t *testing.T) {
	testenv.PythonWithPika(t) // before the examples start
	e := startExamples(t)
	ctx := context.Background()

	// Every case with each kind of properties, on a work item of its own
	// that exists in the application's table in state todo (the rule
	// changes it). The events of creating them stay in the outbox: no
	// relay runs, so every message the consumers see is Plane's.
	type sent struct {
		planeCase
		props, itemID, eventID, eventType string
		row                               planeMessage // what plane_publisher.py was given
	}
	var all []sent
	var msgs []planeMessage
	err := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		for _, props := range []string{propsPlane, propsFull, propsNone} {
			for _, c := range planeCases() {
				itemID := app.NewID()
				if err := e.createItem(ctx, tx, c, itemID); err != nil {
					return err
				}
				ev := c.event(t, itemID)
				id, _ := ev["event_id"].(string)
				row := planeMessage{Properties: props, OutboxID: int64(len(msgs) + 1), Event: ev}
				all = append(all, sent{planeCase: c, props: props, itemID: itemID, eventID: id, eventType: ev["event_type"].(string), row: row})
				msgs = append(msgs, row)
				if c.ruleRuns > 0 {
					// Its first delivery fails: the retry of a
					// message with these properties must arrive too.
					e.recv.failFirst(id)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var wantDelivered, wantRuleRuns, wantRetried, wantDead uint64
	for _, s := range all {
		if s.dead {
			wantDead++
			continue
		}
		wantDelivered++
		wantRuleRuns += uint64(s.ruleRuns)
		if s.ruleRuns > 0 {
			wantRetried++
		}
	}

	drainTap := e.tap(t)
	published := time.Now().Unix()
	bodies := publishAsPlane(t, e.cfg.AMQPURL, e.cfg.Names.Exchange, msgs)
	confirmed := time.Now().Unix()
	// The broker confirmed every publish, so the tap holds them all.
	wire := drainTap()
	if len(wire) != len(msgs) {
		t.Fatalf("%d messages on the exchange, want %d", len(wire), len(msgs))
	}
	wireOf := map[string]amqp.Delivery{} // body → the message on the wire
	for _, d := range wire {
		wireOf[string(d.Body)] = d
	}

	t.Run("the publisher sends each message as Plane does, with the properties it says", func(t *testing.T) {
		for i, d := range wire {
			s := all[i]
			want := amqp.Publishing{Body: []byte(bodies[i])} // propsNone: nothing but the body
			switch s.props {
			case propsPlane: // publisher.py's BasicProperties, no more
				want.DeliveryMode, want.ContentType, want.ContentEncoding = amqp.Persistent, "application/json", "utf-8"
			case propsFull: // what warren's relay sets (internal/amqpx)
				want.DeliveryMode, want.ContentType, want.MessageId, want.Type = amqp.Persistent, "application/json", s.eventID, s.eventType
				entityID, _ := s.row.Event["entity_id"].(string) // the relay sets "" for an event without one
				want.Headers = amqp.Table{warren.HeaderInitiatorType: s.row.Event["initiator_type"], warren.HeaderEntityID: entityID}
			}
			if s.props != propsNone {
				// The publisher's clock, read while it ran.
				want.Timestamp = d.Timestamp
				if sec := d.Timestamp.Unix(); sec < published || sec > confirmed {
					t.Errorf("%s (properties %s): timestamp property %v, want one within the publish (%d..%d)", s.name, s.props, d.Timestamp, published, confirmed)
				}
			}
			if got := testenv.AsPublishing(d); !reflect.DeepEqual(got, want) {
				t.Errorf("%s (properties %s): on the wire\n %+v\nwant\n %+v", s.name, s.props, got, want)
			}
			checkPlaneBody(t, fmt.Sprintf("%s (properties %s)", s.name, s.props), s.row, bodies[i], published, confirmed)
		}
	})

	// Each count is written after what it counts: the POST answered, the
	// rule's transaction committed, the dead letter confirmed.
	testenv.WaitFor(t, 60*time.Second, "every message settled by both consumers", func() bool {
		h, a := e.hook.Stats(), e.auto.Stats()
		return h.Done+h.DeadLettered >= wantDelivered+wantDead && a.Done+a.Skipped+a.DeadLettered >= uint64(len(all))
	})

	t.Run("the webhook delivers every event once, signed, as published", func(t *testing.T) {
		posts, accepted, forged := e.recv.snapshot()
		if len(forged) > 0 {
			t.Errorf("deliveries failing verification: %q", forged)
		}
		for i, s := range all {
			if s.dead {
				continue
			}
			got := accepted[s.eventID]
			if len(got) != 1 {
				t.Errorf("%s (properties %s): accepted %d times, want once", s.name, s.props, len(got))
				continue
			}
			if got[0].eventType != s.eventType || got[0].body != bodies[i] {
				t.Errorf("%s (properties %s): delivered as type %q with body\n %s\nwant type %q and the body Plane published\n %s",
					s.name, s.props, got[0].eventType, got[0].body, s.eventType, bodies[i])
			}
			if want := 1 + s.ruleRuns; posts[s.eventID] != want { // the rule's events fail once
				t.Errorf("%s (properties %s): POSTed %d times, want %d", s.name, s.props, posts[s.eventID], want)
			}
		}
		if len(accepted) != int(wantDelivered) {
			t.Errorf("the receiver accepted %d events, want %d", len(accepted), wantDelivered)
		}
		want := consumer.Stats{Received: wantDelivered + wantRetried + wantDead, Done: wantDelivered, Retried: wantRetried, DeadLettered: wantDead}
		if got := settled(e.hook.Stats()); got != want {
			t.Errorf("webhook stats\n %+v\nwant\n %+v", got, want)
		}
	})

	t.Run("the automation applies its rule to users' work items only", func(t *testing.T) {
		byEvent, followUps, err := e.auto.Runs(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range all {
			if s.dead {
				continue
			}
			if byEvent[s.eventID] != s.ruleRuns {
				t.Errorf("%s (properties %s): the rule ran %d times, want %d", s.name, s.props, byEvent[s.eventID], s.ruleRuns)
			}
			if s.unknownItem {
				continue
			}
			w, err := e.items.Get(ctx, e.pool, s.itemID)
			if err != nil {
				t.Fatal(err)
			}
			if want := map[bool]string{true: "none", false: "urgent"}[s.ruleRuns > 0]; w.Priority != want {
				t.Errorf("%s (properties %s): work item priority %q, want %q", s.name, s.props, w.Priority, want)
			}
		}
		if len(followUps) != int(wantRuleRuns) {
			t.Errorf("%d follow-up events written to the outbox, want %d", len(followUps), wantRuleRuns)
		}
		// Skipped: the import (SYSTEM.*), the state change of an issue the
		// example does not hold, and every event that is not a state
		// change (creation, other fields, deletion, the label).
		want := consumer.Stats{Received: uint64(len(all)), Done: wantRuleRuns, Skipped: wantDelivered - wantRuleRuns, DeadLettered: wantDead}
		if got := settled(e.auto.Stats()); got != want {
			t.Errorf("automation stats\n %+v\nwant\n %+v", got, want)
		}
		// Every event handled was claimed through WrapStore's store.
		if acquired := counterSum(t, e.autoDedup, "warren_dedup_claims_total", "result", "acquired"); acquired < float64(want.Done) {
			t.Errorf("the dedup metrics count %v acquired claims, want at least the %d events handled", acquired, want.Done)
		}
	})

	t.Run("a message without event_id is dead-lettered by both, with its reason", func(t *testing.T) {
		wantBodies := map[string]string{} // body → properties
		for i, s := range all {
			if s.dead {
				wantBodies[bodies[i]] = s.props
			}
		}
		conn := testenv.AMQPConn(t)
		for _, name := range []string{e.cfg.Names.WebhookQueue, e.cfg.Names.AutomationQueue} {
			dead := testenv.Drain(t, conn, dlq.QueueName(name))
			if len(dead) != int(wantDead) {
				t.Errorf("%s: %d dead letters, want %d", name, len(dead), wantDead)
			}
			for _, d := range dead {
				props, ok := wantBodies[string(d.Body)]
				if !ok {
					t.Errorf("%s: dead letter with a body not published as a malformed message: %s", name, d.Body)
					continue
				}
				checkDeadLetter(t, name, props, d, wireOf[string(d.Body)])
			}
			// The log says which event it was, though it has no id. A
			// line is written after its dead letter is counted.
			var lines []string
			testenv.WaitFor(t, 30*time.Second, "the dead-letter log lines", func() bool {
				lines = e.logs.lines(`to=` + dlq.QueueName(name) + ` `)
				return len(lines) >= int(wantDead)
			})
			if len(lines) != int(wantDead) {
				t.Errorf("%s: %d dead-letter log lines, want %d:\n%s", name, len(lines), wantDead, strings.Join(lines, ""))
			}
			for _, line := range lines {
				for _, want := range []string{"dead-lettered", "class=undecodable", "event_type=workitem.updated", "event_id is missing"} {
					if !strings.Contains(line, want) {
						t.Errorf("%s: dead-letter log line lacks %q:\n%s", name, want, line)
					}
				}
			}
		}
	})
}

// checkDeadLetter checks one dead letter of a message Plane published with
// props (published as onWire): why it died, and that it is the message as
// published, its properties kept, held persistently whatever its delivery
// mode was.
func checkDeadLetter(t *testing.T, consumerName, props string, d, onWire amqp.Delivery) {
	t.Helper()
	meta := dlq.ParseMetadata(d.Headers)
	where := fmt.Sprintf("%s, properties %s", consumerName, props)
	if meta.Class != dlq.ClassUndecodable || meta.Error != "invalid event: event_id is missing or empty" || meta.Attempts != 1 ||
		meta.OriginQueue != consumerName || meta.Consumer != consumerName || len(meta.Problems) > 0 {
		t.Errorf("%s: dead-letter metadata %+v, want class undecodable, the missing event_id, attempt 1, from %s", where, meta, consumerName)
	}
	if d.DeliveryMode != amqp.Persistent {
		t.Errorf("%s: dead letter has delivery mode %d, want persistent", where, d.DeliveryMode)
	}
	// Headers gain the dead-letter metadata and the mode becomes
	// persistent; every other property is kept as published.
	got, want := testenv.AsPublishing(d), testenv.AsPublishing(onWire)
	got.Headers, got.DeliveryMode, want.Headers, want.DeliveryMode = nil, 0, nil, 0
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s: dead letter\n %+v\nwant the properties and body as published\n %+v", where, got, want)
	}
}

// checkPlaneBody checks that body is what Plane's publisher writes for
// row: Plane's fields in Plane's order with Plane's values, a NULL
// initiator_id as the string "None", and a publish time as "timestamp".
func checkPlaneBody(t *testing.T, where string, row planeMessage, body string, published, confirmed int64) {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(body))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		t.Errorf("%s: body is not a JSON object: %s", where, body)
		return
	}
	var keys []string
	fields := map[string]any{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Errorf("%s: %v in body %s", where, err, body)
			return
		}
		var v any
		if err := dec.Decode(&v); err != nil {
			t.Errorf("%s: %v in body %s", where, err, body)
			return
		}
		keys = append(keys, tok.(string))
		fields[tok.(string)] = v
	}
	wantKeys := slices.DeleteFunc(slices.Clone(planeBodyKeys), func(k string) bool {
		_, inRow := row.Event[k]
		return slices.Contains(rowColumns, k) && !inRow // a malformed row lacks a column
	})
	if !slices.Equal(keys, wantKeys) {
		t.Errorf("%s: body keys\n %q\nwant Plane's order\n %q", where, keys, wantKeys)
	}
	want := map[string]any{
		"publisher": "plane-event-stream", "version": "1.0", "source": "outbox-poller",
		"outbox_id": json.Number(fmt.Sprint(row.OutboxID)),
	}
	for _, k := range rowColumns {
		if v, ok := row.Event[k]; ok {
			want[k] = v
		}
	}
	if row.Event["initiator_id"] == nil {
		want["initiator_id"] = "None" // Plane's str(None)
	}
	for k, w := range want {
		if got := fields[k]; !reflect.DeepEqual(got, w) {
			t.Errorf("%s: body %s is %#v, want %#v", where, k, got, w)
		}
	}
	if inst, _ := fields["publisher_instance"].(string); !publisherInstance.MatchString(inst) {
		t.Errorf("%s: body publisher_instance %q, want poller-<pid>", where, inst)
	}
	ts, err := json.Number(fmt.Sprint(fields["timestamp"])).Int64()
	if err != nil || ts < published || ts > confirmed {
		t.Errorf("%s: body timestamp %v, want integer seconds within the publish (%d..%d)", where, fields["timestamp"], published, confirmed)
	}
}

// rowColumns are the outbox columns in Plane's body; publisherInstance is
// the instance name Plane's poller gives its publisher.
var (
	rowColumns        = planeBodyKeys[slices.Index(planeBodyKeys, "event_id"):]
	publisherInstance = regexp.MustCompile(`^poller-[0-9]+$`)
)

// counterSum is the sum of the counters of family name in reg whose
// label is value.
func counterSum(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					sum += m.GetCounter().GetValue()
				}
			}
		}
	}
	return sum
}
