package amqpx_test

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/internal/amqpx"
)

// In both formats the relay's message is persistent application/json, as
// Plane's publisher's is, with the routing properties warren adds, and no
// content_encoding: Plane's "utf-8" is left out so that no consumer
// refusing an encoding (a warren consumer before it took "utf-8" as
// identity) dead-letters what the relay sends.
func TestEncodedPublishingProperties(t *testing.T) {
	t.Parallel()
	created := time.Date(2026, 3, 4, 5, 6, 7, 0, time.FixedZone("CET", 3600))
	ev := warren.Event{
		ID: "ev-1", Type: "workitem.updated", EntityType: "issue", EntityID: "iss-1", WorkspaceID: "ws-1",
		InitiatorType: warren.InitiatorSystemImport, Payload: warren.Payload{Data: json.RawMessage(`{}`)}, CreatedAt: created,
	}
	for _, f := range []warren.Format{warren.FormatWarren, warren.FormatPlane} {
		msg, err := amqpx.EncodedPublishing(warren.Encoder{Format: f}, ev, 7)
		if err != nil {
			t.Fatal(err)
		}
		msg.Body = nil
		want := amqp.Publishing{
			MessageId: "ev-1", Type: "workitem.updated", ContentType: "application/json", DeliveryMode: amqp.Persistent,
			Timestamp: created.UTC(), Headers: amqp.Table{warren.HeaderInitiatorType: warren.InitiatorSystemImport, warren.HeaderEntityID: "iss-1"},
		}
		if !reflect.DeepEqual(msg, want) {
			t.Errorf("format %s: properties\n %+v\nwant\n %+v", f, msg, want)
		}
	}
}
