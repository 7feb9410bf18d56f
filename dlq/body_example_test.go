package dlq_test

import (
	"fmt"

	"github.com/warrenmq/warren/dlq"
)

// A Plane message without an event_id does not decode as an event, but is
// still named by its type.
func ExampleBodyEvent() {
	id, eventType := dlq.BodyEvent([]byte(`{"event_type": "workitem.updated", "entity_id": "a1"}`))
	fmt.Printf("id %q, type %q\n", id, eventType)
	id, eventType = dlq.BodyEvent([]byte(`{"event_id": 42, "event_type": "label.created"}`))
	fmt.Printf("id %q, type %q\n", id, eventType)
	id, eventType = dlq.BodyEvent([]byte(`not json`))
	fmt.Printf("id %q, type %q\n", id, eventType)
	// Output:
	// id "", type "workitem.updated"
	// id "", type "label.created"
	// id "", type ""
}
