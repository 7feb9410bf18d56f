package dlqtool_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/dlqtool"
	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/internal/testenv/localrabbit"
)

// nested is a header table nested depth deep.
func nested(depth int) amqp.Table {
	t := amqp.Table{"leaf": "x"}
	for range depth {
		t = amqp.Table{"in": t}
	}
	return t
}

// importMessages is two good messages, then bad: an import must refuse
// the whole lot before publishing the first.
func importMessages(bad amqp.Publishing) []dlqtool.Message {
	good := func(id string) dlqtool.Message {
		return dlqtool.Message{EventID: id, Publishing: amqp.Publishing{MessageId: id, ContentType: "application/json", Body: []byte(`{"event_id":"` + id + `"}`)}}
	}
	bad.Body = append(bad.Body, `{"event_id":"bad"}`...)
	return []dlqtool.Message{good("ok-1"), good("ok-2"), {EventID: "bad", Publishing: bad}}
}

// An import checks, before it publishes anything, every value the client
// library cannot write, the broker refuses or a consumer's client cannot
// read back, so it never stops part way (the first messages in the
// queue, the rest not). Each case was a message the import published up
// to, then failed on.
func TestImportRefusesWhatTheClientOrBrokerWouldRefuse(t *testing.T) {
	t.Parallel()
	conn, ch, top := testenv.NewDeadLetterTopology(t)
	q, err := dlqtool.Open(context.Background(), conn, top.DLQ)
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("x", 256)
	for name, bad := range map[string]amqp.Publishing{
		"message_id over 255 bytes":   {MessageId: long},
		"type over 255 bytes":         {Type: long},
		"content_type over 255 bytes": {ContentType: long},
		"header name over 255 bytes":  {Headers: amqp.Table{long: "v"}},
		"header of no AMQP type":      {Headers: amqp.Table{"x-n": uint64(7)}},
		"headers past a frame":        {Headers: amqp.Table{"x-big": strings.Repeat("y", 200<<10)}},
		"headers nested 33 deep":      {Headers: amqp.Table{"x-deep": nested(32)}},
		"a table of 8193 entries":     {Headers: amqp.Table{"x-wide": wide(8193)}},
		"CC header":                   {Headers: amqp.Table{"CC": []any{top.Consumer}}},
		"BCC header of a wrong type":  {Headers: amqp.Table{"BCC": "x"}},
		"expiration not a number":     {Expiration: "soon"},
		"negative expiration":         {Expiration: "-5"},
		"user_id of another user":     {UserId: "mallory"},
	} {
		t.Run(name, func(t *testing.T) {
			res, err := q.Import(context.Background(), importMessages(bad), dlqtool.ImportOptions{})
			if !errors.Is(err, dlqtool.ErrUnpublishable) || !strings.Contains(err.Error(), "message 3") {
				t.Errorf("import: %v, want the third message refused as unpublishable", err)
			}
			if res.Done != 0 {
				t.Errorf("%d messages published", res.Done)
			}
			if n := testenv.QueueDepth(t, ch, top.DLQ); n != 0 {
				t.Errorf("the DLQ holds %d messages: the import stopped part way", n)
			}
		})
	}
	// What is at a limit, not past it, goes.
	ok := amqp.Publishing{MessageId: strings.Repeat("i", 255), Headers: amqp.Table{"x-deep": nested(31), "x-wide": wide(8192)}, Expiration: "60000", UserId: "guest"}
	if res, err := q.Import(context.Background(), importMessages(ok), dlqtool.ImportOptions{}); err != nil || res.Done != 3 {
		t.Fatalf("import at the limits: %d, %v", res.Done, err)
	}
	// And the client reads them back.
	if msgs, err := q.Peek(context.Background(), dlqtool.PeekOptions{}); err != nil || len(msgs) != 3 {
		t.Errorf("read back %d of 3: %v", len(msgs), err)
	}
}

func wide(n int) amqp.Table {
	t := make(amqp.Table, n)
	for i := range n {
		t[fmt.Sprint(i)] = int32(i)
	}
	return t
}

// A body over the broker's max_message_size is refused by the check, not
// by the broker half way through the import. The limit is the broker's
// setting, which only the broker knows: on a private node, lowered.
func TestImportRefusesABodyOverMaxMessageSize(t *testing.T) {
	t.Parallel() // the only test of the binary on its shared private node (localrabbit.Shared)
	node := localrabbit.Shared(t)
	node.SetMaxMessageSize(t, 4096)
	conn, err := amqp.Dial(node.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	name := testenv.Name(t, "c") + ".dlq"
	if _, err := ch.QueueDeclare(name, false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	q, err := dlqtool.Open(context.Background(), conn, name)
	if err != nil {
		t.Fatal(err)
	}
	res, err := q.Import(context.Background(), importMessages(amqp.Publishing{Body: make([]byte, 8192)}), dlqtool.ImportOptions{})
	if !errors.Is(err, dlqtool.ErrUnpublishable) || !strings.Contains(err.Error(), "max size") || res.Done != 0 {
		t.Errorf("import: %d published, %v; want the third refused for its size before any is published", res.Done, err)
	}
	if q, err := ch.QueueDeclarePassive(name, false, true, false, false, nil); err != nil || q.Messages != 0 {
		t.Errorf("the DLQ holds %d messages (%v)", q.Messages, err)
	}
}

// A dead message whose producer set a CC header naming another queue is
// replayed to its own consumer's queue only: the broker routes by CC as
// well as by routing key, so the header must not go along.
func TestReplayDoesNotFollowRoutingHeaders(t *testing.T) {
	t.Parallel()
	conn, ch, top := testenv.NewDeadLetterTopology(t)
	victim := testenv.Name(t, "victim")
	testenv.CleanupQueues(t, victim)
	if _, err := ch.QueueDeclare(victim, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	m := top.Message(testenv.Dead{ID: "cc", Type: "workitem.created", Err: "x"})
	m.Headers["CC"] = []any{victim}
	m.Headers["BCC"] = []any{victim}
	testenv.PublishInOrder(t, conn, top.DLQ, []amqp.Publishing{m})
	// Publishing it into the DLQ copied it to victim already, which is
	// the broker's routing by CC at work: empty victim again.
	if got := testenv.Drain(t, conn, victim); len(got) != 1 {
		t.Fatalf("the set-up's publish put %d copies in %s, want the 1 CC routes there", len(got), victim)
	}
	q, err := dlqtool.Open(context.Background(), conn, top.DLQ)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := q.Replay(context.Background(), dlqtool.ReplayOptions{}); err != nil || res.Done != 1 {
		t.Fatalf("replay: %+v, %v", res, err)
	}
	if n := testenv.QueueDepth(t, ch, victim); n != 0 {
		t.Errorf("the queue the CC header names got %d copies", n)
	}
	if n := testenv.QueueDepth(t, ch, top.Consumer); n != 1 {
		t.Errorf("the consumer's queue holds %d, want 1", n)
	}
}
