package relay_test

import (
	"strings"
	"testing"
	"time"

	"github.com/warrenmq/warren/internal/testenv"
)

// The polling relay's side of the header wedge (the CDC relay's is
// TestHeaderOverFrameMaxIsDeadNotAHang): each claim used to close the
// connection (FRAME_ERROR), so the row was never settled and the claims
// went on for ever. Now the row is dead at its first claim, its error
// naming the size, and the event behind it is published.
func TestHeaderOverFrameMaxIsDeadAtOnce(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("e", 200_000)
	e := newEnv(t)
	e.bindQueue()
	got := consume(t, e.queue)
	for _, col := range []string{"entity_id", "initiator_type", "tracestate"} {
		e.exec(`INSERT INTO {table} (event_id, event_type, payload, traceparent, `+col+`)
			VALUES ('big-`+col+`', 'workitem.updated', '{"data":{}}', '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01', $1)`, big)
	}
	e.publish(event("after"))
	e.start(e.config(testenv.Name(t, "relay")))
	testenv.WaitFor(t, 30*time.Second, "the event behind the big headers", func() bool { return got.has("after") })
	testenv.WaitFor(t, 30*time.Second, "the 3 big-header rows dead for their headers' size, at their first attempt", func() bool {
		return e.count("state = 'dead' AND attempts <= 1 AND last_error LIKE '%properties and headers take%'") == 3
	})
}
