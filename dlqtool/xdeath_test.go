package dlqtool_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/dlqtool"
	"github.com/warrenmq/warren/internal/testenv"
)

// A producer's message whose CC header brings its content header near
// frame_max, which the broker dead-letters on expiry (a consumer down for
// longer than the queue's TTL). The broker copies every CC routing key into
// x-death's routing-keys, so the DLQ holds a content header of more than
// 2 x frame_max with the broker's default frame_max. The frame filter reads
// it in bounded memory and hands the client a header with only the marker,
// so the tools read past it (before, it passed unread, amqp091-go refused
// it and closed the connection: every tool failed on that DLQ for ever).
func TestXDeathGrownPastTwiceFrameMaxIsReadable(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	big := amqp.Publishing{MessageId: "cc-big", Headers: amqp.Table{"CC": testenv.CCNearFrameMax("cc-big", 16)}, Body: []byte(`{}`)}
	normal := amqp.Publishing{MessageId: "normal", Body: []byte(`{}`)}
	f.top.Expire(t, f.conn, []amqp.Publishing{big, normal})
	size := queueHeadHeaderSize(t, f.top.DLQ)
	t.Logf("content header of the DLQ's head as the management API reads it: about %d bytes", size)
	peekCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	peeked, err := f.q.Peek(peekCtx, dlqtool.PeekOptions{})
	if err != nil || len(peeked) != 2 {
		t.Fatalf("peek of a DLQ whose head the broker dead-lettered with x-death: %d messages, %v", len(peeked), err)
	}
}

// queueHeadHeaderSize is the length of the JSON the management API gives
// for the headers of queue's head (about their wire size: each CC routing
// key is once in CC and once in x-death's routing-keys).
func queueHeadHeaderSize(t *testing.T, queue string) int {
	t.Helper()
	req, _ := http.NewRequest("POST", "http://127.0.0.1:15672/api/queues/%2f/"+queue+"/get",
		strings.NewReader(`{"count":1,"ackmode":"ack_requeue_true","encoding":"auto"}`))
	req.SetBasicAuth("guest", "guest")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got []struct {
		Properties struct {
			Headers json.RawMessage `json:"headers"`
		} `json:"properties"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil || len(got) == 0 {
		t.Fatalf("management get: %v", err)
	}
	return len(got[0].Properties.Headers)
}
