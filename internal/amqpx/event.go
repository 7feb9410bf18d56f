package amqpx

import (
	"encoding/json"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren"
)

// EventPublishing encodes ev as the message every warren producer sends:
// the JSON envelope as the body, and the AMQP properties that let the broker
// and tools route and inspect it without decoding the body (message_id =
// event_id, type = event_type, persistent, the creation time, and the
// initiator type as a header).
func EventPublishing(ev warren.Event) (amqp.Publishing, error) {
	if err := ev.Validate(); err != nil {
		return amqp.Publishing{}, err
	}
	body, err := json.Marshal(ev)
	if err != nil {
		return amqp.Publishing{}, fmt.Errorf("encode event %s: %w", ev.ID, err)
	}
	ts := ev.CreatedAt
	if ts.IsZero() {
		ts = time.Now()
	}
	return amqp.Publishing{
		MessageId:    ev.ID,
		Type:         ev.Type,
		ContentType:  "application/json",
		DeliveryMode: amqp.Persistent,
		Timestamp:    ts.UTC(),
		Headers:      amqp.Table{warren.HeaderInitiatorType: ev.InitiatorType},
		Body:         body,
	}, nil
}
