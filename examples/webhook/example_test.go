package webhook_test

import (
	"fmt"
	"net/http"
	"time"

	"github.com/warrenmq/warren/examples/webhook"
)

// A receiver verifies a delivery before trusting its event id; the id,
// type and timestamp are signed with the body.
func ExampleVerify() {
	secret := []byte("endpoint-secret")
	body := []byte(`{"event_id":"ev-1","event_type":"workitem.updated"}`)
	sig, err := webhook.Sign(secret, "ev-1", "workitem.updated", "1800000000", body)
	if err != nil {
		panic(err)
	}
	h := http.Header{}
	h.Set(webhook.HeaderEventID, "ev-1")
	h.Set(webhook.HeaderEventType, "workitem.updated")
	h.Set(webhook.HeaderTimestamp, "1800000000")
	h.Set(webhook.HeaderSignature, sig)
	now := time.Unix(1_800_000_030, 0)
	fmt.Println(webhook.Verify(secret, h, body, 5*time.Minute, now))

	h.Set(webhook.HeaderEventID, "ev-2") // a replay under another id
	fmt.Println(webhook.Verify(secret, h, body, 5*time.Minute, now))

	_, err = webhook.Sign(secret, "ev-1\nworkitem.deleted", "x", "1800000000", body)
	fmt.Println(err)
	// Output:
	// <nil>
	// webhook: signature does not match
	// webhook: event cannot be signed: invalid event: event_id contains a control character (U+000A at byte 4)
}
