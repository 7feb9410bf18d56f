package cdc_test

import (
	"strings"
	"testing"
	"time"

	"github.com/warrenmq/warren/internal/testenv"
)

// A column the relay carries as an AMQP header (entity_id,
// initiator_type, tracestate), written by SQL with a 200 KB value, would
// make a content header over frame_max: RabbitMQ closes the connection
// (FRAME_ERROR) and every later session meets the same row first. The
// relay makes each such row dead at once, and the events behind it are
// published.
func TestHeaderOverFrameMaxIsDeadNotAHang(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("e", 200_000)
	e := newEnv(t)
	e.bindQueue()
	r, _ := e.start(e.config())
	testenv.WaitFor(t, time.Minute, "the relay to stream", r.Streaming)
	for _, col := range []string{"entity_id", "initiator_type", "tracestate"} {
		e.ob.Exec(`INSERT INTO {table} (event_id, event_type, payload, traceparent, `+col+`)
			VALUES ('big-`+col+`', 'workitem.updated', '{"data":{}}', '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01', $1)`, big)
	}
	e.ob.Publish(testenv.OutboxEvent("after"))
	e.receive([]string{"after"}, 30*time.Second)
	testenv.WaitFor(t, 30*time.Second, "the 3 big-header rows dead for their headers' size", func() bool {
		return e.ob.Count("state = 'dead' AND last_error LIKE '%properties and headers take%'") == 3
	})
}
