package relay_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/warrenmq/warren/internal/amqpx"
	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/relay"
)

// startRefused starts a relay (its config adjusted by tweak) whose
// exchange routes to one full queue with reject-publish: every publish is
// nacked until makeRoom is called. It returns the env, the relay's broker
// sessions, once the first has begun, and makeRoom.
func startRefused(t *testing.T, tweak func(*relay.Config)) (e *env, sessions *counter, makeRoom func()) {
	e = newEnv(t)
	makeRoom = testenv.DeclareFullQueue(t, testenv.AMQPConn(t), e.queue, nil)
	if err := e.ch.QueueBind(e.queue, "", e.exchange, false, nil); err != nil {
		t.Fatal(err)
	}
	sessions = &counter{}
	cfg := e.config(testenv.Name(t, "relay"))
	tweak(&cfg)
	e.start(cfg, func(r *relay.Relay) { relay.SetConnectedHook(r, sessions.hook()) })
	sessions.waitAbove(t, 0, "the first broker session")
	return e, sessions, makeRoom
}

// A relay whose every publish is nacked for amqpx.NackedSessionLimit ends
// the session and dials again: RabbitMQ 3.10 keeps refusing a channel that
// first published to a quorum queue during its leader's election.
// Once the queue takes messages, the event arrives.
func TestEveryPublishNackedEndsTheSession(t *testing.T) {
	t.Parallel()
	e, sessions, makeRoom := startRefused(t, func(cfg *relay.Config) {
		cfg.MaxAttempts = 1000 // the row keeps being nacked, never dead
	})
	e.publish(testenv.OutboxEvent("refused"))
	sessions.waitAbove(t, 1, "a new session after every publish was nacked")

	makeRoom()
	got := consume(t, e.queue)
	got.waitDistinct(t, 1, time.Minute)
	got.requireAll(t, []string{"refused"})
}

// One nacked publish followed by silence does not end the session: the
// rule needs nacks that go on (each within amqpx.NackedSessionLimit of the
// last) for the limit, with none confirmed. Before, a quiet relay with one
// refused event dialled again 5s after each of its retries.
func TestOneNackThenSilenceKeepsTheSession(t *testing.T) {
	t.Parallel()
	e, sessions, _ := startRefused(t, func(cfg *relay.Config) {
		// The refused row's retry is an hour away: after its nack, silence.
		cfg.RetryMin, cfg.RetryMax = time.Hour, time.Hour
	})
	e.publish(testenv.OutboxEvent("refused-once"))
	testenv.WaitFor(t, 60*time.Second, "the nacked row put back", func() bool { return e.count("last_error IS NOT NULL") == 1 })

	// Absence can only be shown over time: twice the limit after the
	// nack (which came before its row was put back), the session is the
	// first one still.
	quiet := time.Now().Add(2 * amqpx.NackedSessionLimit)
	for time.Now().Before(quiet) {
		if n := sessions.value(); n != 1 {
			t.Fatalf("%d broker sessions after one nack and silence, want 1", n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A destination nacked for amqpx.NackedSessionLimit ends the session even
// while the relay's publishes to other destinations are confirmed:
// RabbitMQ's post-election refusal is per channel and queue, so the
// channel serves the healthy queue and keeps refusing the stuck one.
func TestOneDestinationNackedAmidConfirmsEndsTheSession(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.refusePoison()
	got := consume(t, e.queue)
	sessions := &counter{}
	cfg := e.config(testenv.Name(t, "relay"))
	cfg.MaxAttempts = 1000 // the refused row keeps being nacked, never dead
	cfg.RetryMin, cfg.RetryMax = 200*time.Millisecond, time.Second
	e.start(cfg, func(r *relay.Relay) { relay.SetConnectedHook(r, sessions.hook()) })
	sessions.waitAbove(t, 0, "the first broker session")
	stuck := testenv.OutboxEvent("stuck")
	stuck.Type = "poison.updated"
	e.publish(stuck)

	// Healthy traffic, confirmed, between the stuck row's nacks: load,
	// not synchronisation; the wait below is on the session count.
	tick := time.NewTicker(300 * time.Millisecond)
	defer tick.Stop()
	deadline := time.Now().Add(60 * time.Second)
	for i := 0; sessions.value() < 2; i++ {
		if time.Now().After(deadline) {
			t.Fatalf("one session after 60s of a destination nacked amid confirms (%d healthy events delivered)", got.distinct())
		}
		ev := testenv.OutboxEvent(fmt.Sprintf("healthy-%d", i))
		ev.Type = "good.updated"
		e.publish(ev)
		<-tick.C
	}
	if got.distinct() == 0 {
		t.Fatal("no healthy row was confirmed: the test did not mix traffic")
	}
}

// A queue that refuses beside a healthy one on the fanout exchange: the
// broker delivers the healthy queue's copy and nacks the publish, so the
// row is retried (a copy each time) and ends dead though delivered. This
// is RabbitMQ's rule, not one the relay can see past (the nack does not
// say which queue refused); the dead row's error says the event may have
// reached other queues, so that an operator does not redrive it blindly.
func TestNackBesideAHealthyQueueSaysItMayHaveBeenDelivered(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.bindQueue()
	refuser := testenv.Name(t, "refuser")
	testenv.CleanupQueues(t, refuser)
	if err := declareQueue(e.ch, refuser, refusing); err != nil {
		t.Fatal(err)
	}
	if err := e.ch.QueueBind(refuser, "", e.exchange, false, nil); err != nil {
		t.Fatal(err)
	}
	got := consume(t, e.queue)
	cfg := e.config(testenv.Name(t, "relay"))
	cfg.MaxAttempts = 2
	e.start(cfg)
	e.publish(testenv.OutboxEvent("fanned"))
	testenv.WaitFor(t, 60*time.Second, "the row dead", func() bool { return e.count(`state = 'dead'`) == 1 })
	if n := e.count(`strpos(last_error, 'may have reached other queues') > 0`); n != 1 {
		t.Fatal("the dead row's error does not say the event may have reached other queues")
	}
	got.waitDistinct(t, 1, 30*time.Second) // the healthy queue had it
}
