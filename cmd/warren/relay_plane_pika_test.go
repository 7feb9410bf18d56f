package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strconv"
	"testing"
	"time"

	warrenpkg "github.com/warrenmq/warren"
	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/relay"
)

// The command as an operator runs it on Plane's own outbox table — `warren
// relay run --schema plane --format plane` — feeds a consumer written the
// way Plane's are (pika, json.loads, fields by name;
// relay/testdata/plane_consumer.py), which finds every field it reads with
// Plane's JSON types: the uuid columns as strings, a NULL project_id and a
// NULL initiator_id as null, outbox_id the row's id.
func TestRelayRunPlaneTableFeedsPlaneConsumer(t *testing.T) {
	t.Parallel()
	pythonWithPika := testenv.PythonWithPika(t)
	ctx := context.Background()
	p := testenv.NewPlaneTable(t, true)
	exchange, queue := testenv.Name(t, "ex"), testenv.Name(t, "q")
	testenv.CleanupExchanges(t, exchange)
	testenv.CleanupQueues(t, queue)
	ch := testenv.Channel(t)
	for _, err := range []error{
		ch.ExchangeDeclare(exchange, "fanout", true, false, false, false, nil),
		func() error { _, err := ch.QueueDeclare(queue, true, false, false, false, nil); return err }(),
		ch.QueueBind(queue, "", exchange, false, nil),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}

	// Two rows as Plane's triggers write them: a user's change in a
	// project, and a workspace-level change by the system, with no project
	// and no initiator id.
	type row struct {
		id                                   int64
		eventID, entityID, workspaceID       string
		projectID, initiatorID               *string
		eventType, entityType, initiatorType string
		data, previous                       string
		createdUnix                          int64
	}
	insert := `INSERT INTO %q (event_id, event_type, entity_type, entity_id, payload, workspace_id, project_id, initiator_id, initiator_type)
		VALUES (gen_random_uuid(), $1, $2, gen_random_uuid(), jsonb_build_object('data', $3::jsonb, 'previous_attributes', $4::jsonb),
			gen_random_uuid(), $5::uuid, $6::uuid, $7)
		RETURNING id, event_id::text, entity_id::text, workspace_id::text, project_id::text, initiator_id::text, floor(extract(epoch FROM created_at))::bigint`
	rows := []*row{
		{eventType: "workitem.updated", entityType: "issue", initiatorType: "USER", data: `{"state":"done"}`, previous: `{"state":"todo"}`},
		{eventType: "label.created", entityType: "label", initiatorType: "SYSTEM.IMPORT", data: `{"name":"bug"}`, previous: `null`},
	}
	user, project := "5b9b1e0e-6a43-4f8e-9d0a-2f1c3b4d5e6f", "0d9c8b7a-6f5e-4d3c-2b1a-0f9e8d7c6b5a"
	rows[0].projectID, rows[0].initiatorID = &project, &user
	for _, r := range rows {
		err := p.Pool.QueryRow(ctx, fmt.Sprintf(insert, p.Name), r.eventType, r.entityType, r.data, r.previous, r.projectID, r.initiatorID, r.initiatorType).
			Scan(&r.id, &r.eventID, &r.entityID, &r.workspaceID, &r.projectID, &r.initiatorID, &r.createdUnix)
		if err != nil {
			t.Fatal(err)
		}
	}

	environ := map[string]string{"DATABASE_URL": testenv.DatabaseURL(t), "AMQP_URL": testenv.AMQPURL(t)}
	runCtx, cancel := context.WithCancel(ctx)
	var res outboxCLIResult
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		res = runOutboxCLI(runCtx, environ, "relay", "run", "--schema", "plane", "--format", "plane", "--table", p.Name,
			"--exchange", exchange, "--name", testenv.Name(t, "relay"), "--publisher", "plane-event-stream", "--publisher-instance", "poller-cli")
	}()
	t.Cleanup(func() {
		cancel()
		<-finished
	})

	cctx, cancelConsumer := context.WithTimeout(ctx, 3*time.Minute)
	defer cancelConsumer()
	consumer := exec.CommandContext(cctx, pythonWithPika, "../../relay/testdata/plane_consumer.py", testenv.AMQPURL(t), queue, strconv.Itoa(len(rows)), "120")
	var stderr bytes.Buffer
	consumer.Stderr = &stderr
	out, err := consumer.Output()
	if err != nil {
		t.Fatalf("plane_consumer.py: %v\n%s%s\nrelay run: %s", err, out, stderr.Bytes(), res.stderr)
	}

	want := map[string]map[string]any{}
	for _, r := range rows {
		var data, previous any
		if err := json.Unmarshal([]byte(r.data), &data); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(r.previous), &previous); err != nil {
			t.Fatal(err)
		}
		orNil := func(s *string) any {
			if s == nil {
				return nil
			}
			return *s
		}
		want[r.eventID] = map[string]any{
			"event_id": r.eventID, "event_type": r.eventType, "entity_type": r.entityType, "entity_id": r.entityID,
			"workspace_id": r.workspaceID, "project_id": orNil(r.projectID), "initiator_id": orNil(r.initiatorID),
			"initiator_type": r.initiatorType, "payload": map[string]any{"data": data, "previous_attributes": previous},
			"version": warrenpkg.PlaneEnvelopeVersion, "outbox_id": json.Number(strconv.FormatInt(r.id, 10)),
			"timestamp": json.Number(strconv.FormatInt(r.createdUnix, 10)), "publisher": "plane-event-stream",
			"publisher_instance": "poller-cli", "source": relay.DefaultSource,
			"_automation_handles": r.eventType == "workitem.updated",
		}
	}
	if rows[1].projectID != nil || rows[1].initiatorID != nil {
		t.Fatal("the second row was meant to have NULL project_id and initiator_id")
	}
	testenv.CheckPlaneConsumerRead(t, out, want)
	testenv.WaitFor(t, 60*time.Second, "processed_at set on both rows", func() bool { return p.Count("processed_at IS NOT NULL") == len(rows) })

	cancel()
	<-finished
	if res.code != 0 {
		t.Fatalf("relay run: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
}
