package testenv

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/dlq"
	"github.com/warrenmq/warren/internal/amqpx"
)

// DeadLetterTopology is the part of a consumer's topology the dead-letter
// tools work on, declared the way the consumer declares it: the consumer's
// queue bound to a fanout exchange and dead-lettering (on expiry) through
// its DLX into its DLQ.
type DeadLetterTopology struct {
	Consumer string // the consumer's name, and its queue's
	Exchange string // the fanout exchange the queue is bound to
	DLX      string // dlq.ExchangeName(Consumer)
	DLQ      string // dlq.QueueName(Consumer)
}

// DeclareDeadLetterTopology declares a fresh topology for a consumer with a
// unique name, deleted when t ends.
func DeclareDeadLetterTopology(t testing.TB, ch *amqp.Channel) DeadLetterTopology {
	t.Helper()
	return DeclareDeadLetterTopologyOfType(t, ch, "classic")
}

// DeclareDeadLetterTopologyOfType is DeclareDeadLetterTopology with queues
// of queueType ("classic" or "quorum").
func DeclareDeadLetterTopologyOfType(t testing.TB, ch *amqp.Channel, queueType string) DeadLetterTopology {
	t.Helper()
	c := Name(t, "c")
	top := DeadLetterTopology{Consumer: c, Exchange: c + ".events", DLX: dlq.ExchangeName(c), DLQ: dlq.QueueName(c)}
	CleanupQueues(t, top.Consumer, top.DLQ)
	CleanupExchanges(t, top.Exchange, top.DLX)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("declare dead-letter topology: %v", err)
		}
	}
	must(ch.ExchangeDeclare(top.Exchange, "fanout", true, false, false, false, nil))
	must(ch.ExchangeDeclare(top.DLX, "fanout", true, false, false, false, nil))
	_, err := ch.QueueDeclare(top.DLQ, true, false, false, false, amqp.Table{"x-queue-type": queueType})
	must(err)
	must(ch.QueueBind(top.DLQ, "", top.DLX, false, nil))
	_, err = ch.QueueDeclare(top.Consumer, true, false, false, false, amqp.Table{"x-queue-type": queueType, "x-dead-letter-exchange": top.DLX})
	must(err)
	must(ch.QueueBind(top.Consumer, "", top.Exchange, false, nil))
	return top
}

// NewDeadLetterTopology dials the broker, opens a channel and declares a
// fresh topology, all owned by t.
func NewDeadLetterTopology(t testing.TB) (*amqp.Connection, *amqp.Channel, DeadLetterTopology) {
	t.Helper()
	conn := AMQPConn(t)
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return conn, ch, DeclareDeadLetterTopology(t, ch)
}

// Dead describes one dead message for [DeadLetterTopology.Message].
type Dead struct {
	ID, Type string
	Class    dlq.Class
	Err      string
	// Contract and Field: what the error named as broken, if anything.
	Contract, Field string
	At              time.Time // failure time; default now
	Attempts        int
	Body            []byte // default: a JSON event with ID and Type
}

// Message builds d as the consumer dead-letters it: the event published to
// Exchange, with the headers dlq.Stamp writes.
func (top DeadLetterTopology) Message(d Dead) amqp.Publishing {
	at := d.At
	if at.IsZero() {
		at = time.Now()
	}
	body := d.Body
	if body == nil {
		body, _ = json.Marshal(map[string]any{"event_id": d.ID, "event_type": d.Type, "entity_type": "issue", "entity_id": "e-" + d.ID, "workspace_id": "w-1", "payload": map[string]any{"data": map[string]any{"n": 1}}, "version": "1.0"})
	}
	headers := dlq.Stamp(amqp.Table{warren.HeaderInitiatorType: warren.InitiatorUser}, dlq.Failure{
		Err: d.Err, Contract: d.Contract, Field: d.Field, At: at, Queue: top.Consumer, Exchange: top.Exchange, RoutingKey: "",
		Consumer: top.Consumer, Host: "test-host",
	}, d.Attempts, d.Class)
	return amqp.Publishing{
		MessageId: d.ID, Type: d.Type, ContentType: "application/json", DeliveryMode: amqp.Persistent,
		Timestamp: at.Truncate(time.Second), Headers: headers, Body: body,
	}
}

// PublishConfirmed publishes msgs to queue through the default exchange
// with confirms, many in flight at once (so not necessarily in order), and
// fails t unless every one is confirmed.
func PublishConfirmed(t testing.TB, conn *amqp.Connection, queue string, msgs []amqp.Publishing) {
	t.Helper()
	p, err := amqpx.NewPublisher(context.Background(), conn, 512)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 1)
	next := make(chan int)
	for range 64 {
		wg.Go(func() {
			for i := range next {
				if err := p.Publish(ctx, "", queue, msgs[i]); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		})
	}
	for i := range msgs {
		next <- i
	}
	close(next)
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatalf("publish to %s: %v", queue, err)
	default:
	}
}

// PublishInOrder publishes msgs to queue one at a time, each confirmed
// before the next, so the queue holds them in this order.
func PublishInOrder(t testing.TB, conn *amqp.Connection, queue string, msgs []amqp.Publishing) {
	t.Helper()
	p, err := amqpx.NewPublisher(context.Background(), conn, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for _, m := range msgs {
		if err := p.Publish(context.Background(), "", queue, m); err != nil {
			t.Fatalf("publish to %s: %v", queue, err)
		}
	}
}

// Expire makes RabbitMQ itself dead-letter msgs from the consumer's queue
// with reason "expired", so they reach the DLQ with a real x-death header
// and none of warren's: each is published to the queue with a 1 ms
// per-message TTL. It waits until the DLQ has grown by len(msgs), so the
// consumer's queue must hold nothing else meanwhile.
func (top DeadLetterTopology) Expire(t testing.TB, conn *amqp.Connection, msgs []amqp.Publishing) {
	t.Helper()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	before := QueueDepth(t, ch, top.DLQ)
	expiring := make([]amqp.Publishing, len(msgs))
	for i, m := range msgs {
		m.Expiration = "1"
		expiring[i] = m
	}
	PublishInOrder(t, conn, top.Consumer, expiring)
	WaitFor(t, 10*time.Second, "messages to expire into "+top.DLQ, func() bool {
		return QueueDepth(t, ch, top.DLQ) == before+len(msgs)
	})
}

// Drain removes and returns every message in queue, head first.
func Drain(t testing.TB, conn *amqp.Connection, queue string) []amqp.Delivery {
	t.Helper()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	var out []amqp.Delivery
	for {
		d, ok, err := ch.Get(queue, true)
		if err != nil {
			t.Fatalf("get from %s: %v", queue, err)
		}
		if !ok {
			return out
		}
		out = append(out, d)
	}
}

// MessageIDs returns the message_id of each delivery, in order.
func MessageIDs(ds []amqp.Delivery) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.MessageId
	}
	return out
}

// AsPublishing returns the message of a delivery as it would be published:
// every property, the headers and the body.
func AsPublishing(d amqp.Delivery) amqp.Publishing {
	return amqp.Publishing{
		Headers: d.Headers, ContentType: d.ContentType, ContentEncoding: d.ContentEncoding,
		DeliveryMode: d.DeliveryMode, Priority: d.Priority, CorrelationId: d.CorrelationId, ReplyTo: d.ReplyTo,
		Expiration: d.Expiration, MessageId: d.MessageId, Timestamp: d.Timestamp, Type: d.Type, UserId: d.UserId,
		AppId: d.AppId, Body: d.Body,
	}
}
