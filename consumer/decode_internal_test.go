package consumer

import (
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Plane's publisher sets content_encoding "utf-8" on every message: a
// charset, not a transformation of the body, so the message decodes. An
// encoding the consumer would have to undo (or a charset other than JSON's)
// is refused with a reason, which makes the message undecodable.
func TestDecodeTakesUTF8ContentEncodingAsIdentity(t *testing.T) {
	t.Parallel()
	c, err := New(Config{Name: "decode-test"})
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"event_id": "ev-1", "event_type": "workitem.updated", "initiator_id": "None", "initiator_type": "USER"}`)
	for _, enc := range []string{"", "identity", "utf-8", "UTF-8", "utf8", "Utf8"} {
		m, err := c.decode(amqp.Delivery{ContentType: "application/json", ContentEncoding: enc, Body: body}, "q")
		if err != nil || m.Event.ID != "ev-1" || m.Event.InitiatorID != "None" {
			t.Errorf("content encoding %q: %v, event %+v; want it decoded", enc, err, m.Event)
		}
	}
	for _, enc := range []string{"gzip", "deflate", "br", "utf-16", "latin1", "utf-8, gzip"} {
		_, err := c.decode(amqp.Delivery{ContentType: "application/json", ContentEncoding: enc, Body: body}, "q")
		if err == nil || !strings.Contains(err.Error(), `content encoding "`+enc+`" is not supported`) {
			t.Errorf("content encoding %q: %v, want it refused", enc, err)
		}
	}
}

// A producer's message (no failure record, the JSON content type warren and
// Plane send) decodes in two allocations, the Message and its event's
// strings: the attempt count and the content type are read without the
// parsing only a retry's copy or another content type needs, and the
// attempt still counts for a retry's copy.
func TestDecodeOfAProducersMessageAllocatesTwice(t *testing.T) {
	// Serial: testing.AllocsPerRun counts every goroutine's allocations, other tests' too.
	c, err := New(Config{Name: "decode-test"})
	if err != nil {
		t.Fatal(err)
	}
	d := amqp.Delivery{
		ContentType: "application/json", Exchange: "ex", Headers: amqp.Table{"x-warren-initiator-type": "USER"},
		Body: []byte(`{"event_id": "ev-1", "event_type": "workitem.updated", "initiator_type": "USER"}`),
	}
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := c.decode(withTrustedHistory(d, ""), "q"); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 2 {
		t.Errorf("decode allocated %v times, want 2", allocs)
	}
	d.Exchange, d.Headers = "", amqp.Table{"x-warren-attempts": int32(2)}
	if m, err := c.decode(withTrustedHistory(d, ""), "q"); err != nil || m.Attempt != 3 {
		t.Errorf("a retry's copy after 2 attempts decodes as attempt %d (%v), want 3", m.Attempt, err)
	}
}
