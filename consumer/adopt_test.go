package consumer_test

import (
	"context"
	"crypto/rand"
	"errors"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/consumer"
	"github.com/warrenmq/warren/dlq"
	"github.com/warrenmq/warren/internal/amqpx"
	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/internal/testenv/localrabbit"
)

// planeTopology is a queue declared the way Plane's BaseConsumer declares
// one with pika: the exchange plane.event_stream (durable fanout), a
// dead-letter exchange shared by every Plane consumer
// (plane.event_stream.dlq, durable fanout), the DLQ <queue>_dlq with a
// 7-day TTL that nothing binds, and the queue with a 1-hour TTL (pika
// sends a Python int below 2³¹ as a signed 32-bit integer), the shared
// dead-letter exchange and a routing key naming the DLQ. Names are unique
// to the test; everything is deleted when it ends.
type planeTopology struct {
	exchange, dlx, dlq, queue string
	queueArgs                 amqp.Table
}

func declarePlaneQueue(t *testing.T, ch *amqp.Channel, withDLX bool) planeTopology {
	t.Helper()
	// Names as long as Plane's (plane.event_stream.dlq, a queue named
	// after its service), not testenv.Name's 60 bytes: a refusal quoting
	// the queue's name and its dead-letter routing key must fit the 255
	// bytes of an AMQP reply text, and Plane's do.
	id := strings.ToLower(rand.Text()[:8])
	p := planeTopology{exchange: "wt.plane." + id, dlx: "wt.plane." + id + ".dlq", queue: "wt.plane." + id + ".webhook"}
	p.dlq = p.queue + "_dlq"
	p.queueArgs = amqp.Table{"x-message-ttl": int32(3600000)}
	if withDLX {
		p.queueArgs["x-dead-letter-exchange"] = p.dlx
		p.queueArgs["x-dead-letter-routing-key"] = p.dlq
	}
	deleteAfter(t, []string{p.queue, p.dlq}, []string{p.exchange, p.dlx})
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(ch.ExchangeDeclare(p.exchange, amqp.ExchangeFanout, true, false, false, false, nil))
	must(ch.ExchangeDeclare(p.dlx, amqp.ExchangeFanout, true, false, false, false, nil))
	_, err := ch.QueueDeclare(p.dlq, true, false, false, false, amqp.Table{"x-message-ttl": int32(604800000)})
	must(err)
	_, err = ch.QueueDeclare(p.queue, true, false, false, false, p.queueArgs)
	must(err)
	// As Plane's consumer binds it: pika's queue_bind without a key
	// binds with the queue's name.
	must(ch.QueueBind(p.queue, p.queue, p.exchange, false, nil))
	return p
}

// deleteAfter deletes the queues and exchanges when t ends, those that
// exist: a test may expect some never to be created.
func deleteAfter(t *testing.T, queues, exchanges []string) {
	url := testenv.AMQPURL(t)
	t.Cleanup(func() {
		conn, err := amqpx.Dial(context.Background(), url, amqpx.DialOptions{Name: "cleanup " + t.Name()})
		if err != nil {
			t.Errorf("cleanup: %v", err)
			return
		}
		defer conn.Close()
		for _, q := range queues {
			if ch, err := conn.Channel(); err == nil {
				ch.QueueDelete(q, false, false, false)
				ch.Close()
			}
		}
		for _, x := range exchanges {
			if ch, err := conn.Channel(); err == nil {
				ch.ExchangeDelete(x, false, false)
				ch.Close()
			}
		}
	})
}

// exists reports whether a queue (or, with exchange, an exchange) exists,
// asked passively on a channel of its own.
func exists(t *testing.T, conn *amqp.Connection, kind, name string) bool {
	t.Helper()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	if kind == "exchange" {
		err = ch.ExchangeDeclarePassive(name, amqp.ExchangeFanout, true, false, false, false, nil)
	} else {
		_, err = ch.QueueDeclarePassive(name, true, false, false, false, nil)
	}
	var ae *amqp.Error
	switch {
	case err == nil:
		return true
	case errors.As(err, &ae) && ae.Code == amqp.NotFound:
		return false
	}
	t.Fatalf("inspect %s %s: %v", kind, name, err)
	return false
}

// sameArgs reports whether queue still has exactly args, as far as the
// broker compares them: a declaration with them is accepted only then.
func sameArgs(t *testing.T, conn *amqp.Connection, queue string, args amqp.Table) error {
	t.Helper()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	_, err = ch.QueueDeclare(queue, true, false, false, false, args)
	return err
}

// A queue Plane declared, holding events published before warren starts:
// a consumer in adopt mode takes it as it is, consumes every event, retries
// and dead-letters a failing one through the tier and DLQ it added, and
// deletes nothing. With DeadLetterExchange naming the queue's dead-letter
// exchange, the DLQ is bound there and a message that expires in the queue
// reaches it; without (Plane's shared exchange left alone), nothing is bound
// to it. With only a TTL, nothing is bound at all.
func TestAdoptPlaneQueue(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		withDLX   bool
		claimDLX  bool // DeadLetterExchange names the queue's dead-letter exchange
		wantNotes string
	}{
		{"TTL and shared dead-letter exchange", true, false, "the DLQ is not bound there"},
		{"dead-letter exchange named in the config", true, true, "the DLQ is bound to the queue's dead-letter exchange"},
		{"TTL only", false, false, "the queue has no dead-letter exchange"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			conn := testenv.AMQPConn(t)
			ch, err := conn.Channel()
			if err != nil {
				t.Fatal(err)
			}
			plane := declarePlaneQueue(t, ch, tc.withDLX)
			const n = 20
			good := manyEvents(n, "ok", "workitem.updated")
			newPublisher(t).events(plane.exchange, "", append(good, event("fail-0", "workitem.updated"))...)

			var log *logLines
			c := consumerAt(t, testenv.AMQPURL(t), func(cfg *consumer.Config) {
				cfg.Name, cfg.Exchange, cfg.AdoptQueue = plane.queue, plane.exchange, true
				cfg.RetryDelays, cfg.MaxAttempts = []time.Duration{100 * time.Millisecond}, 2
				if tc.claimDLX {
					cfg.DeadLetterExchange = plane.dlx
				}
				log = captureLog(t, cfg)
			})
			topo := c.Topology()
			deleteAfter(t, topo.Queues(), []string{topo.DLX})
			rec := newRecorder()
			c.HandleFunc("", func(_ context.Context, m *warren.Message) error {
				rec.record(m)
				if strings.HasPrefix(m.Event.ID, "fail-") {
					return errors.New("downstream refused")
				}
				return nil
			})
			stop := start(t, c)
			rec.waitDistinct(t, n+1, 30*time.Second)
			dead := getOne(t, ch, topo.DLQ, 30*time.Second)
			if md := dlq.ParseMetadata(dead.Headers); dead.MessageId != "fail-0" || md.Class != dlq.ClassExhausted || md.Attempts != 2 || md.OriginQueue != plane.queue {
				t.Errorf("dead letter %q: %+v; want fail-0, exhausted after 2 attempts in %s", dead.MessageId, md, plane.queue)
			}
			for _, ev := range good {
				if got := rec.count(ev.ID); got != 1 {
					t.Errorf("event %s handled %d times", ev.ID, got)
				}
			}
			if err := stop(); err != nil {
				t.Fatal(err)
			}

			// Taken as it is: the queue keeps Plane's arguments, and Plane's
			// DLQ and exchanges are still there.
			if err := sameArgs(t, conn, plane.queue, plane.queueArgs); err != nil {
				t.Errorf("the queue no longer has Plane's arguments: %v", err)
			}
			for _, q := range []string{plane.dlq, topo.DLQ, topo.Retry[0].Queue} {
				if !exists(t, conn, "queue", q) {
					t.Errorf("queue %s does not exist", q)
				}
			}
			if !exists(t, conn, "exchange", plane.dlx) {
				t.Errorf("exchange %s is gone", plane.dlx)
			}
			if !tc.claimDLX && exists(t, conn, "exchange", topo.DLX) {
				t.Errorf("exchange %s was declared, though the queue dead-letters elsewhere", topo.DLX)
			}
			// No binding of warren's is left beside Plane's: without
			// Plane's, an event published to the exchange reaches nothing.
			if err := ch.QueueUnbind(plane.queue, plane.queue, plane.exchange, nil); err != nil {
				t.Fatal(err)
			}
			msg, err := amqpx.EventPublishing(event("after-unbind", "workitem.updated"))
			if err != nil {
				t.Fatal(err)
			}
			if err := newPublisher(t).pub.Publish(context.Background(), plane.exchange, "", msg); !errors.Is(err, amqpx.ErrUnroutable) {
				t.Errorf("publish with Plane's binding removed = %v, want unroutable: the consumer left a binding of its own", err)
			}
			for _, want := range []string{"topology declared", "adopted=true", "x-message-ttl=3600000", "queue " + topo.Retry[0].Queue, tc.wantNotes} {
				if !log.has(want) {
					t.Errorf("log lacks %q", want)
				}
			}
			if tc.withDLX && !log.has("x-dead-letter-exchange="+plane.dlx) {
				t.Errorf("log lacks the queue's dead-letter exchange")
			}

			// Expiry goes to the queue's dead-letter exchange: to the DLQ
			// when it is bound there, else nowhere warren owns.
			expiring := amqp.Publishing{MessageId: "expiring", Body: []byte(`{}`), Expiration: "1"}
			testenv.PublishInOrder(t, conn, plane.queue, []amqp.Publishing{expiring})
			if tc.claimDLX {
				d := getOne(t, ch, topo.DLQ, 10*time.Second)
				if d.MessageId != "expiring" || dlq.ParseMetadata(d.Headers).Class != dlq.ClassExpired {
					t.Errorf("DLQ got %q (%v), want the expired message", d.MessageId, d.Headers)
				}
				return
			}
			testenv.WaitFor(t, 10*time.Second, "the message to leave the queue", func() bool {
				return testenv.QueueDepth(t, ch, plane.queue) == 0
			})
			if depth := testenv.QueueDepth(t, ch, topo.DLQ); depth != 0 {
				t.Errorf("DLQ holds %d messages; nothing should be bound to the queue's dead-letter exchange", depth)
			}
		})
	}
}

// Without AdoptQueue, a queue with Plane's arguments is the clear error it
// always was, now saying what to do, and the failed start declared
// nothing: no dead-letter exchange, DLQ or retry tier.
func TestNotAdoptingCreatesNothing(t *testing.T) {
	t.Parallel()
	conn := testenv.AMQPConn(t)
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	plane := declarePlaneQueue(t, ch, true)
	c := consumerAt(t, testenv.AMQPURL(t), func(cfg *consumer.Config) { cfg.Name, cfg.Exchange = plane.queue, plane.exchange })
	topo := c.Topology()
	deleteAfter(t, topo.Queues(), []string{topo.DLX})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = c.Run(ctx)
	var te *consumer.TopologyError
	if !errors.As(err, &te) || te.Name != plane.queue || te.Argument != "x-dead-letter-exchange" || !strings.Contains(err.Error(), "AdoptQueue") {
		t.Fatalf("Run = %v; want a TopologyError naming x-dead-letter-exchange of %s and AdoptQueue", err, plane.queue)
	}
	assertNothingNew(t, conn, topo)
}

// assertNothingNew fails t if any of topo's own queues or its dead-letter
// exchange exists.
func assertNothingNew(t *testing.T, conn *amqp.Connection, topo consumer.Topology) {
	t.Helper()
	if exists(t, conn, "exchange", topo.DLX) {
		t.Errorf("exchange %s was declared", topo.DLX)
	}
	for _, q := range append([]string{topo.DLQ}, topo.Retry[0].Queue) {
		if exists(t, conn, "queue", q) {
			t.Errorf("queue %s was declared", q)
		}
	}
}

// A start in adopt mode whose DLQ exists with other arguments (Plane's
// 7-day TTL, against a config that keeps dead messages a day) fails naming
// that queue, after learning the queue's arguments and before declaring
// anything: the retry tiers are not left behind, and the queue still holds
// its messages. Only the consumer's queue is adopted.
func TestAdoptConflictingDLQCreatesNothing(t *testing.T) {
	t.Parallel()
	conn := testenv.AMQPConn(t)
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	plane := declarePlaneQueue(t, ch, true)
	newPublisher(t).events(plane.exchange, "", manyEvents(3, "kept", "workitem.updated")...)
	c := consumerAt(t, testenv.AMQPURL(t), func(cfg *consumer.Config) {
		cfg.Name, cfg.Exchange, cfg.AdoptQueue = plane.queue, plane.exchange, true
		cfg.DeadLetterExchange, cfg.DLQTTL = plane.dlx, 24*time.Hour
	})
	topo := c.Topology()
	deleteAfter(t, topo.Queues(), nil)
	if _, err := ch.QueueDeclare(topo.DLQ, true, false, false, false, amqp.Table{"x-message-ttl": int32(604800000)}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = c.Run(ctx)
	var te *consumer.TopologyError
	if !errors.As(err, &te) || te.Name != topo.DLQ || te.Argument != "x-message-ttl" {
		t.Fatalf("Run = %v; want a TopologyError naming x-message-ttl of %s", err, topo.DLQ)
	}
	if exists(t, conn, "queue", topo.Retry[0].Queue) {
		t.Errorf("retry queue %s was declared", topo.Retry[0].Queue)
	}
	if depth := testenv.QueueDepth(t, ch, plane.queue); depth != 3 {
		t.Errorf("the queue holds %d messages, want its 3", depth)
	}
}

// An argument the probe cannot learn is a clear error, not a guess: with a
// long queue name the broker cuts its refusal at 255 bytes, before the
// value.
func TestAdoptUnlearnableArgument(t *testing.T) {
	t.Parallel()
	conn := testenv.AMQPConn(t)
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	queue := testenv.Name(t, "q") + strings.Repeat("x", 150)
	exchange := testenv.Name(t, "ex")
	deleteAfter(t, []string{queue}, []string{exchange})
	if _, err := ch.QueueDeclare(queue, true, false, false, false, amqp.Table{"x-dead-letter-exchange": "some.dead.letter.exchange"}); err != nil {
		t.Fatal(err)
	}
	c := consumerAt(t, testenv.AMQPURL(t), func(cfg *consumer.Config) {
		cfg.Name, cfg.Exchange, cfg.AdoptQueue = queue, exchange, true
	})
	assertStartRefused(t, conn, c, exchange, "cut its reply")
}

// assertStartRefused runs c, which must stop with a TopologyError about its
// queue whose text says want, having declared nothing: neither its
// exchange nor any of its own queues or its dead-letter exchange.
func assertStartRefused(t *testing.T, conn *amqp.Connection, c *consumer.BaseConsumer, exchange, want string) {
	t.Helper()
	topo := c.Topology()
	deleteAfter(t, topo.Queues(), []string{topo.DLX})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := c.Run(ctx)
	var te *consumer.TopologyError
	if !errors.As(err, &te) || te.Name != topo.Queue || !strings.Contains(err.Error(), want) {
		t.Fatalf("Run = %v; want a TopologyError about %s saying %q", err, topo.Queue, want)
	}
	if exists(t, conn, "exchange", exchange) {
		t.Errorf("exchange %s was declared", exchange)
	}
	assertNothingNew(t, conn, topo)
}

// A declaration refused midway, after some of the topology was created
// (here the broker refuses the retry tier: the account may configure
// everything else), removes what that start created: the exchanges and
// the DLQ it had declared are gone, and Run returns the refusal.
func testFailedDeclarationRemovesWhatItCreated(t *testing.T) {
	node := localrabbit.Shared(t)
	exchange, name := testenv.Name(t, "ex"), testenv.Name(t, "c")
	_, account, _ := brokerPermissions(exchange, name)
	account.configure = strings.Replace(account.configure, `|retry\..+`, "", 1)
	url := addBrokerUser(t, node, account)
	c := consumerAt(t, url, func(cfg *consumer.Config) { cfg.Name, cfg.Exchange = name, exchange })
	deleteTopologyAfter(t, node, c.Topology())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := c.Run(ctx)
	var te *consumer.TopologyError
	var ae *amqp.Error
	if !errors.As(err, &te) || te.Name != c.Topology().Retry[0].Queue || !errors.As(err, &ae) || ae.Code != amqp.AccessRefused {
		t.Fatalf("Run = %v; want the broker's refusal of %s", err, c.Topology().Retry[0].Queue)
	}
	admin, err := amqpx.Dial(ctx, node.URL(), amqpx.DialOptions{Name: t.Name()})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if exists(t, admin, "exchange", exchange) {
		t.Errorf("exchange %s was left behind", exchange)
	}
	assertNothingNew(t, admin, c.Topology())
}

// A start in adopt mode whose queue does not exist refuses, saying there
// is nothing to adopt, and declares nothing: a queue created from warren's
// config would have arguments (its own dead-letter exchange, no routing
// key) that the service it was to be adopted from cannot declare again,
// so rolling back to that service would fail.
func TestAdoptMissingQueueCreatesNothing(t *testing.T) {
	t.Parallel()
	conn := testenv.AMQPConn(t)
	queue, exchange := testenv.Name(t, "q"), testenv.Name(t, "ex")
	deleteAfter(t, []string{queue}, []string{exchange})
	c := consumerAt(t, testenv.AMQPURL(t), func(cfg *consumer.Config) {
		cfg.Name, cfg.Exchange, cfg.AdoptQueue = queue, exchange, true
	})
	assertStartRefused(t, conn, c, exchange, "nothing to adopt: queue "+queue+" does not exist; start without AdoptQueue")
	if exists(t, conn, "queue", queue) {
		t.Errorf("queue %s was declared", queue)
	}
}

// An adopted queue deleted under the running consumer is declared again
// with the arguments it was adopted with, not the config's: Plane's own
// declaration of it still succeeds (a rollback to Plane's consumer works),
// and the consumer consumes from it again.
func TestAdoptedQueueDeletedIsDeclaredAgainAsAdopted(t *testing.T) {
	t.Parallel()
	conn := testenv.AMQPConn(t)
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	plane := declarePlaneQueue(t, ch, true)
	var log *logLines
	c := consumerAt(t, testenv.AMQPURL(t), func(cfg *consumer.Config) {
		cfg.Name, cfg.Exchange, cfg.AdoptQueue = plane.queue, plane.exchange, true
		log = captureLog(t, cfg)
	})
	topo := c.Topology()
	deleteAfter(t, topo.Queues(), []string{topo.DLX})
	rec := newRecorder()
	c.HandleFunc("", func(_ context.Context, m *warren.Message) error {
		rec.record(m)
		return nil
	})
	start(t, c)
	pub := newPublisher(t)
	pub.events(plane.exchange, "", event("before", "workitem.updated"))
	rec.waitDistinct(t, 1, 30*time.Second)

	if _, err := ch.QueueDelete(plane.queue, false, false, false); err != nil {
		t.Fatal(err)
	}
	// Consumed again: the queue exists, bound (bindings come before the
	// consumer), with the consumer on it.
	testenv.WaitFor(t, 60*time.Second, "the queue declared again and consumed", func() bool {
		probe, err := conn.Channel() // a failed passive declare closes its channel
		if err != nil {
			t.Fatal(err)
		}
		defer probe.Close()
		q, err := probe.QueueDeclarePassive(plane.queue, true, false, false, false, nil)
		return err == nil && q.Consumers > 0
	})
	if err := sameArgs(t, conn, plane.queue, plane.queueArgs); err != nil {
		t.Fatalf("Plane's declaration of the queue declared again is refused: %v", err)
	}
	pub.events(plane.exchange, "", event("after", "workitem.updated"))
	rec.waitDistinct(t, 2, 30*time.Second)
	if rec.count("after") != 1 {
		t.Errorf("the event published after the queue was declared again was handled %d times", rec.count("after"))
	}
	if !log.has("the adopted queue was missing") {
		t.Errorf("log does not say the adopted queue was declared again")
	}
}
