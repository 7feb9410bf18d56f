package relay_test

import (
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/relay"
)

// A relay whose every publish is nacked for amqpx.NackedSessionLimit ends
// the session and dials again: RabbitMQ 3.10 keeps refusing a channel that
// first published to a quorum queue during its leader's election.
// A queue at its length limit with reject-publish is how a test makes
// every publish nacked. Once the queue takes messages, the event arrives.
func TestEveryPublishNackedEndsTheSession(t *testing.T) {
	e := newEnv(t)
	for _, err := range []error{
		declareQueue(e.ch, e.queue, amqp.Table{"x-max-length": int32(0), "x-overflow": "reject-publish"}),
		e.ch.QueueBind(e.queue, "", e.exchange, false, nil),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	sessions := &counter{}
	cfg := e.config(testenv.Name(t, "relay"))
	cfg.MaxAttempts = 1000 // the row keeps being nacked, never dead
	e.start(cfg, func(r *relay.Relay) { relay.SetConnectedHook(r, sessions.hook()) })
	sessions.waitAbove(t, 0, "the first broker session")
	e.publish(testenv.OutboxEvent("refused"))
	sessions.waitAbove(t, 1, "a new session after every publish was nacked")

	if _, err := e.ch.QueueDelete(e.queue, false, false, false); err != nil {
		t.Fatal(err)
	}
	e.bindQueue() // declared again, without the limit
	got := consume(t, e.queue)
	got.waitDistinct(t, 1, time.Minute)
	got.requireAll(t, []string{"refused"})
}
