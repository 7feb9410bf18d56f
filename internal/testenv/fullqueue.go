package testenv

import (
	"maps"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
)

// DeclareFullQueue declares queue (durable, with args besides) at a length
// limit of one message with reject-publish, and fills it with one filler
// message: the broker nacks every publish routed to it. The returned
// makeRoom takes the filler out, after which the queue takes one message.
//
// A test that wants a queue to refuse and later accept must go through
// this, never delete a refusing queue and declare it again: RabbitMQ
// confirms a message routed to a queue that is deleted before it took the
// message, so a publish in flight at the delete is acked and gone, and the
// publisher rightly counts it delivered (TestEveryPublishNackedEndsTheSession
// lost its event that way under CI's load).
func DeclareFullQueue(t testing.TB, conn *amqp.Connection, queue string, args amqp.Table) (makeRoom func()) {
	t.Helper()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ch.Close() })
	full := maps.Clone(args)
	if full == nil {
		full = amqp.Table{}
	}
	full["x-max-length"], full["x-overflow"] = int32(1), "reject-publish"
	if _, err := ch.QueueDeclare(queue, true, false, false, false, full); err != nil {
		t.Fatal(err)
	}
	PublishInOrder(t, conn, queue, []amqp.Publishing{{MessageId: fillerID, Body: []byte("filler")}})
	return func() {
		t.Helper()
		d, ok, err := ch.Get(queue, true)
		switch {
		case err != nil:
			t.Fatal(err)
		case !ok:
			t.Fatalf("queue %s is empty: its filler is gone", queue)
		case d.MessageId != fillerID:
			t.Fatalf("queue %s took %q beside its filler", queue, d.MessageId)
		}
	}
}

const fillerID = "testenv-filler"
