package relay_test

// Plane's own kind of client reads what the relay publishes in Plane's
// format: relay/testdata/plane_consumer.py consumes with pika (Debian's
// python3-pika, which scripts/services.sh installs) the way Plane's
// consumers do.

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/internal/amqpx"
	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/relay"
)

func TestPlaneConsumerReadsPlaneFormat(t *testing.T) {
	t.Parallel()
	pythonWithPika := testenv.PythonWithPika(t)
	e := newEnv(t)
	e.bindQueue()
	created := time.Date(2026, 3, 4, 5, 6, 7, 890e6, time.UTC)
	user := warren.Event{
		ID: "pl-1", Type: "workitem.updated", EntityType: "issue", EntityID: "iss-1", WorkspaceID: "ws-1",
		ProjectID: "proj-1", InitiatorID: "user-1", InitiatorType: warren.InitiatorUser,
		Payload:   warren.Payload{Data: json.RawMessage(`{"state":"done"}`), PreviousAttributes: json.RawMessage(`{"state":"todo"}`)},
		CreatedAt: created,
	}
	// No project, no initiator id, a system actor: nulls where Plane has them.
	system := warren.Event{
		ID: "pl-2", Type: "label.created", EntityType: "label", EntityID: "lab-1", WorkspaceID: "ws-1",
		InitiatorType: warren.InitiatorSystemImport, Payload: warren.Payload{Data: json.RawMessage(`{"name":"bug"}`)},
		CreatedAt: created, Version: "2.0",
	}
	e.publish(user, system)
	rowIDs := map[string]int64{}
	rows, err := e.pool.Query(context.Background(), "SELECT event_id, id FROM "+e.table)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var ev string
		var id int64
		if err := rows.Scan(&ev, &id); err != nil {
			t.Fatal(err)
		}
		rowIDs[ev] = id
	}
	if rows.Close(); rows.Err() != nil || len(rowIDs) != 2 {
		t.Fatalf("outbox rows %v, %v", rowIDs, rows.Err())
	}

	cfg := e.config(testenv.Name(t, "relay"))
	cfg.Format = warren.FormatPlane
	cfg.Publisher.Name = "plane-test-publisher" // Instance, Version and Source keep their defaults
	e.start(cfg)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, pythonWithPika, "testdata/plane_consumer.py", testenv.AMQPURL(t), e.queue, "2", "120")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("plane_consumer.py: %v\n%s%s", err, out, stderr.Bytes())
	}

	want := map[string]map[string]any{
		"pl-1": {"event_id": "pl-1", "event_type": "workitem.updated", "entity_type": "issue", "entity_id": "iss-1",
			"workspace_id": "ws-1", "project_id": "proj-1", "initiator_id": "user-1", "initiator_type": "USER",
			"payload":   map[string]any{"data": map[string]any{"state": "done"}, "previous_attributes": map[string]any{"state": "todo"}},
			"version":   warren.PlaneEnvelopeVersion,
			"outbox_id": json.Number(strconv.FormatInt(rowIDs["pl-1"], 10)), "_automation_handles": true},
		"pl-2": {"event_id": "pl-2", "event_type": "label.created", "entity_type": "label", "entity_id": "lab-1",
			"workspace_id": "ws-1", "project_id": nil, "initiator_id": nil, "initiator_type": "SYSTEM.IMPORT",
			"payload": map[string]any{"data": map[string]any{"name": "bug"}, "previous_attributes": nil},
			"version": "2.0", "outbox_id": json.Number(strconv.FormatInt(rowIDs["pl-2"], 10)), "_automation_handles": false},
	}
	for _, w := range want {
		w["timestamp"] = json.Number(strconv.FormatInt(created.Unix(), 10))
		w["publisher"] = "plane-test-publisher"
		w["publisher_instance"] = amqpx.Hostname()
		w["source"] = relay.DefaultSource
	}
	testenv.CheckPlaneConsumerRead(t, out, want)
}
