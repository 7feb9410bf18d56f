package dlq

import "encoding/json"

// BodyEvent returns the event_id and event_type a message body holds, read
// leniently: a body that is not a JSON object, or a field that is missing
// or not a string, gives "" for that field, and nothing is validated.
//
// It names a message by its event where the AMQP properties do not
// (Plane's services publish without message_id and type), also when the
// body did not decode as an event: a dead letter whose event_id is missing
// is still named by its event_type in the consumer's log and in the DLQ
// tools. The names are for people reading logs and searching queues, never
// for processing.
func BodyEvent(body []byte) (id, eventType string) {
	var ev struct {
		ID   string `json:"event_id"`
		Type string `json:"event_type"`
	}
	// An error still leaves the fields decoded before or after a bad one.
	_ = json.Unmarshal(body, &ev)
	return ev.ID, ev.Type
}
