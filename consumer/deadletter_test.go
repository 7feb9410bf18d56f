package consumer_test

import (
	"bytes"
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/consumer"
	"github.com/warrenmq/warren/contract"
	"github.com/warrenmq/warren/dlq"
	"github.com/warrenmq/warren/internal/amqpx"
	"github.com/warrenmq/warren/internal/testenv"
)

// Every way a message can die lands it in the DLQ with its class, error,
// attempts, times, origin, consumer and host, and with its body unchanged.
func TestDeadLetterClassesAndMetadata(t *testing.T) {
	t.Parallel()
	good, err := amqpx.EventPublishing(event("ok", "workitem.created"))
	if err != nil {
		t.Fatal(err)
	}
	withBody := func(body string) amqp.Publishing {
		p := good
		p.Body = []byte(body)
		return p
	}
	cases := []struct {
		name        string
		msg         amqp.Publishing
		handler     func(ctx context.Context, m *warren.Message) error
		unhandled   consumer.UnhandledPolicy
		class       dlq.Class
		attempts    int
		errContains string
		// contract and field are the headers naming what broke: only
		// for an error that named a field.
		contract, field string
	}{
		{
			name:    "exhausted",
			msg:     good,
			handler: func(ctx context.Context, m *warren.Message) error { return errBoom },
			class:   dlq.ClassExhausted, attempts: 3, errContains: "boom",
		},
		{
			name:    "permanent",
			msg:     good,
			handler: func(ctx context.Context, m *warren.Message) error { return warren.Permanent(errBoom) },
			class:   dlq.ClassPermanent, attempts: 1, errContains: "boom",
		},
		{
			name:    "panic",
			msg:     good,
			handler: func(ctx context.Context, m *warren.Message) error { panic("nil map") },
			class:   dlq.ClassExhausted, attempts: 3, errContains: "handler panicked: nil map",
		},
		{
			name:      "unhandled",
			msg:       good,
			unhandled: consumer.DeadLetterUnhandled,
			class:     dlq.ClassUnhandled, attempts: 1, errContains: `no handler registered for event type "workitem.created"`,
		},
		{
			// A typed handler whose type the data does not fit: never
			// called, dead-lettered with the bodies that are no event.
			name: "typed handler, data of another type",
			msg:  good,
			handler: warren.Typed(func(ctx context.Context, m *warren.Message, d struct {
				Priority int `json:"priority"`
			}) error {
				panic("called with data that did not decode")
			}).Handle,
			class: dlq.ClassUndecodable, attempts: 1, errContains: "payload.data: json: cannot unmarshal string into Go struct field .priority of type int",
			field: "payload.data.priority",
		},
		{
			// A contract the data breaks: never handed to the handler,
			// dead-lettered with the contract and the field.
			name: "contract broken",
			msg:  good,
			handler: contract.Middleware(contractSet(t, contract.MustOf[struct {
				Priority int `json:"priority"`
			}]("workitem.created", "1.0")).Check)(warren.HandlerFunc(func(context.Context, *warren.Message) error {
				panic("called with data that breaks its contract")
			})).Handle,
			class: dlq.ClassUndecodable, attempts: 1, errContains: "contract workitem.created@1.0: payload.data.priority: got string, want integer",
			contract: "workitem.created@1.0", field: "payload.data.priority",
		},
		{name: "malformed json", msg: withBody(`{"event_id": "x", `), class: dlq.ClassUndecodable, attempts: 1, errContains: "not valid JSON"},
		{name: "missing event_id", msg: withBody(`{"event_type":"workitem.created"}`), class: dlq.ClassUndecodable, attempts: 1, errContains: "event_id is missing"},
		{name: "wrong field type", msg: withBody(`{"event_id":"a","event_type":["x"]}`), class: dlq.ClassUndecodable, attempts: 1, errContains: "event_type must be a string"},
		{name: "not utf-8", msg: withBody("{\"event_id\":\"\xfe\",\"event_type\":\"x\"}"), class: dlq.ClassUndecodable, attempts: 1, errContains: "UTF-8"},
		{name: "oversized", msg: withBody(`{"event_id":"a","event_type":"x","pad":"` + strings.Repeat("x", 3<<20) + `"}`), class: dlq.ClassUndecodable, attempts: 1, errContains: "over the 1048576-byte limit"},
		{
			name: "wrong content type",
			msg: func() amqp.Publishing {
				p := good
				p.ContentType = "application/xml"
				return p
			}(),
			class: dlq.ClassUndecodable, attempts: 1, errContains: `content type "application/xml"`,
		},
	}
	host, _ := os.Hostname()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := newConsumer(t, func(cfg *consumer.Config) {
				cfg.MaxAttempts = 3
				cfg.RetryDelays = []time.Duration{20 * time.Millisecond}
				cfg.Unhandled = tc.unhandled
			})
			if tc.handler != nil {
				c.HandleFunc("workitem.", tc.handler)
			}
			// The consumer must keep going after a bad message: a good one
			// published after it is still handled.
			followUp := make(chan struct{})
			c.HandleFunc("after.", func(ctx context.Context, m *warren.Message) error {
				close(followUp)
				return nil
			})
			start(t, c)
			topo := c.Topology()
			pub := newPublisher(t)
			before := time.Now()
			pub.raw(topo.Exchange, tc.msg)

			d := getOne(t, testenv.Channel(t), topo.DLQ, 60*time.Second)
			meta := dlq.ParseMetadata(d.Headers)
			if meta.Class != tc.class {
				t.Errorf("class %q, want %q", meta.Class, tc.class)
			}
			if meta.Attempts != tc.attempts {
				t.Errorf("attempts %d, want %d", meta.Attempts, tc.attempts)
			}
			if !strings.Contains(meta.Error, tc.errContains) {
				t.Errorf("error %q does not contain %q", meta.Error, tc.errContains)
			}
			if meta.OriginQueue != topo.Queue || meta.OriginExchange != topo.Exchange || meta.Consumer != c.Config().Name || meta.Host != host {
				t.Errorf("origin metadata %+v", meta)
			}
			if meta.FirstFailure.Before(before.Add(-time.Second)) || meta.LastFailure.Before(meta.FirstFailure) {
				t.Errorf("failure times first=%v last=%v", meta.FirstFailure, meta.LastFailure)
			}
			if tc.attempts > 1 && !meta.LastFailure.After(meta.FirstFailure) {
				t.Errorf("after %d attempts the last failure %v should follow the first %v", tc.attempts, meta.LastFailure, meta.FirstFailure)
			}
			if !bytes.Equal(d.Body, tc.msg.Body) || d.MessageId != tc.msg.MessageId || d.DeliveryMode != amqp.Persistent {
				t.Errorf("dead message changed: id %q mode %d, body equal %v", d.MessageId, d.DeliveryMode, bytes.Equal(d.Body, tc.msg.Body))
			}
			if len(meta.Problems) > 0 {
				t.Errorf("header problems: %v", meta.Problems)
			}
			if meta.Contract != tc.contract || meta.Field != tc.field {
				t.Errorf("contract %q, field %q; want %q, %q", meta.Contract, meta.Field, tc.contract, tc.field)
			}

			pub.events(topo.Exchange, "", event("after", "after.check"))
			select {
			case <-followUp:
			case <-time.After(60 * time.Second):
				t.Fatal("the consumer stopped handling messages after the bad one")
			}
			// The copy is in the DLQ once confirmed; the worker counts it
			// right after, so wait for the count rather than race it.
			testenv.WaitFor(t, 60*time.Second, "the dead letter to be counted", func() bool { return c.Stats().DeadLettered >= 1 })
			if s := c.Stats(); s.DeadLettered != 1 {
				t.Errorf("stats %+v, want 1 dead-lettered", s)
			}
		})
	}
}

// A message that outlives the queue's TTL is dead-lettered by the broker
// into the DLQ, where its class reads "expired".
func TestExpiredMessagesLandInDLQ(t *testing.T) {
	t.Parallel()
	for _, qt := range queueTypes {
		t.Run(string(qt), func(t *testing.T) {
			t.Parallel()
			c := newConsumer(t, func(cfg *consumer.Config) {
				cfg.QueueType = qt
				cfg.MessageTTL = 200 * time.Millisecond
			})
			block := make(chan struct{})
			c.HandleFunc("", func(ctx context.Context, m *warren.Message) error {
				<-block
				return nil
			})
			stop := start(t, c)
			// Stop consuming so the message waits in the queue and expires.
			close(block)
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			topo := c.Topology()
			newPublisher(t).events(topo.Exchange, "", event("stale", "workitem.updated"))
			d := getOne(t, testenv.Channel(t), topo.DLQ, 60*time.Second)
			meta := dlq.ParseMetadata(d.Headers)
			if meta.Class != dlq.ClassExpired || meta.OriginQueue != topo.Queue || meta.OriginExchange != topo.Exchange {
				t.Errorf("metadata %+v, want class expired from %s via %s", meta, topo.Queue, topo.Exchange)
			}
			if d.MessageId != "stale" {
				t.Errorf("message id %q", d.MessageId)
			}
		})
	}
}

// Quorum queues dead-letter handler failures the same way.
func TestQuorumDeadLetters(t *testing.T) {
	t.Parallel()
	c := newConsumer(t, func(cfg *consumer.Config) {
		cfg.QueueType = consumer.Quorum
		cfg.MaxAttempts = 2
		cfg.RetryDelays = []time.Duration{20 * time.Millisecond}
	})
	c.HandleFunc("", func(ctx context.Context, m *warren.Message) error {
		if m.Event.ID == "perm" {
			return warren.Permanent(errBoom)
		}
		return errBoom
	})
	start(t, c)
	newPublisher(t).events(c.Topology().Exchange, "", event("perm", "x.y"), event("flaky", "x.y"))
	ch := testenv.Channel(t)
	classes := map[string]dlq.Class{}
	for range 2 {
		d := getOne(t, ch, c.Topology().DLQ, 60*time.Second)
		classes[d.MessageId] = dlq.ParseMetadata(d.Headers).Class
	}
	if classes["perm"] != dlq.ClassPermanent || classes["flaky"] != dlq.ClassExhausted {
		t.Errorf("classes %v", classes)
	}
}

// When the DLQ cannot take a message (here it refuses every publish), the
// original is not acked: it is requeued and dead-lettered once the DLQ
// takes messages again. Acking before the confirm would have lost it. (A
// deleted DLQ is declared again at once: TestDeletedDLQIsDeclaredAgain.)
// After 5s of nothing but nacks the consumer publishes on a new channel
// (RabbitMQ 3.10 keeps refusing a channel that published to a quorum queue
// during its leader's election; a full queue is how a test makes every
// publish nacked), without ending the session.
func TestFailedDeadLetterPublishKeepsTheMessage(t *testing.T) {
	t.Parallel()
	c := newConsumer(t, nil)
	c.HandleFunc("", func(ctx context.Context, m *warren.Message) error { return warren.Permanent(errBoom) })
	start(t, c)
	topo := c.Topology()
	ch := testenv.Channel(t)
	if _, err := ch.QueueDelete(topo.DLQ, false, false, false); err != nil {
		t.Fatal(err)
	}
	// Deleted before any dead letter is under way; from now on the DLQ
	// only gains room, never goes (see testenv.DeclareFullQueue).
	makeRoom := testenv.DeclareFullQueue(t, testenv.AMQPConn(t), topo.DLQ, amqp.Table{"x-message-ttl": consumer.DefaultDLQTTL.Milliseconds()})
	newPublisher(t).events(topo.Exchange, "", event("precious", "x.y"))
	testenv.WaitFor(t, 60*time.Second, "a failed dead-letter publish", func() bool { return c.Stats().PublishFailures >= 1 })
	if s := c.Stats(); s.DeadLettered != 0 {
		t.Fatalf("counted as dead-lettered although the DLQ refused it: %+v", s)
	}
	testenv.WaitFor(t, 60*time.Second, "a new publish channel after 5s of nacks", func() bool { return c.Stats().PublishersRenewed >= 1 })
	if s := c.Stats(); s.Reconnects != 0 || s.DeadLettered != 0 {
		t.Fatalf("renewing the publisher reconnected or dead-lettered: %+v", s)
	}

	makeRoom()
	d := getOne(t, ch, topo.DLQ, 60*time.Second)
	if d.MessageId != "precious" {
		t.Fatalf("DLQ got %q", d.MessageId)
	}
	if dlq.ParseMetadata(d.Headers).Class != dlq.ClassPermanent {
		t.Errorf("class %v", dlq.ParseMetadata(d.Headers).Class)
	}
}

// A message that never gets acked — here, every consumer that takes it is
// stopped before its handler returns, as a crash would — is dead-lettered by
// the broker once a quorum queue's delivery limit is passed, instead of
// coming back forever.
func TestQuorumDeliveryLimitDeadLettersAMessageThatNeverCompletes(t *testing.T) {
	t.Parallel()
	first := newConsumer(t, func(cfg *consumer.Config) {
		cfg.QueueType = consumer.Quorum
		cfg.DeliveryLimit = 2
		cfg.ShutdownGrace = 10 * time.Millisecond
	})
	cfg, topo := first.Config(), first.Topology()
	ch := testenv.Channel(t)
	for round := 1; round <= 10; round++ {
		c := first
		if round > 1 {
			var err error
			if c, err = consumer.New(cfg); err != nil {
				t.Fatal(err)
			}
		}
		started := make(chan struct{}, 1)
		c.HandleFunc("", func(ctx context.Context, m *warren.Message) error {
			started <- struct{}{}
			<-ctx.Done() // never finishes on its own
			return ctx.Err()
		})
		stop := start(t, c)
		if round == 1 {
			newPublisher(t).events(topo.Exchange, "", event("crasher", "workitem.updated"))
		}
		select {
		case <-started:
		case <-time.After(60 * time.Second):
			t.Fatalf("round %d: the message was not delivered", round)
		}
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		testenv.WaitFor(t, 60*time.Second, "the message back in the queue or in the DLQ", func() bool {
			return testenv.QueueDepth(t, ch, topo.Queue)+testenv.QueueDepth(t, ch, topo.DLQ) == 1
		})
		if testenv.QueueDepth(t, ch, topo.DLQ) == 0 {
			continue
		}
		d := getOne(t, ch, topo.DLQ, 60*time.Second)
		meta := dlq.ParseMetadata(d.Headers)
		if d.MessageId != "crasher" || meta.Class != dlq.ClassDeliveryLimit || meta.OriginQueue != topo.Queue {
			t.Fatalf("dead letter %q: %+v", d.MessageId, meta)
		}
		if round != cfg.DeliveryLimit+1 {
			t.Errorf("delivered %d times before the limit of %d stopped it", round, cfg.DeliveryLimit)
		}
		return
	}
	t.Fatal("still redelivered after 10 rounds")
}

// An event_id with a newline (or any control character) is malformed: the
// webhook cannot put it in a header, a log line would be split by it. It
// is dead-lettered at once as undecodable, not handed to the handler to
// fail every attempt as if its dependency were down.
func TestControlCharacterInEventIDIsDeadAtOnce(t *testing.T) {
	t.Parallel()
	c := newConsumer(t, func(cfg *consumer.Config) {
		cfg.MaxAttempts = 3
		cfg.RetryDelays = []time.Duration{20 * time.Millisecond}
	})
	rec := newRecorder()
	c.HandleFunc("workitem.", func(ctx context.Context, m *warren.Message) error {
		rec.record(m)
		// What the webhook's HTTP client says about such an id.
		return errBoom
	})
	start(t, c)
	topo := c.Topology()
	msg, err := amqpx.EventPublishing(event("ok", "workitem.created"))
	if err != nil {
		t.Fatal(err)
	}
	msg.MessageId = "evt-1\nforged log line"
	msg.Body = []byte(`{"event_id":"evt-1\nforged log line","event_type":"workitem.created"}`)
	newPublisher(t).raw(topo.Exchange, msg)

	d := getOne(t, testenv.Channel(t), topo.DLQ, 60*time.Second)
	meta := dlq.ParseMetadata(d.Headers)
	if meta.Class != dlq.ClassUndecodable || meta.Attempts != 1 || !strings.Contains(meta.Error, "event_id contains a control character (U+000A") {
		t.Errorf("dead letter class %q after %d attempts, error %q; want undecodable after 1, saying why", meta.Class, meta.Attempts, meta.Error)
	}
	if n := rec.distinct(); n != 0 {
		t.Errorf("the handler ran for it %d times, want never", rec.count("evt-1\nforged log line"))
	}
	if !bytes.Equal(d.Body, msg.Body) {
		t.Errorf("dead letter body %q, want %q unchanged", d.Body, msg.Body)
	}
}

// Plane's services publish with no message_id and no type property: the
// dead-letter log line names the event by its body's event_id and
// event_type, so an operator can find it (warren dlq show --id) from the
// log.
func TestDeadLetterLogNamesAPropertylessEventByItsBody(t *testing.T) {
	t.Parallel()
	var logs *logLines
	c := newConsumer(t, func(cfg *consumer.Config) { logs = captureLog(t, cfg) })
	c.HandleFunc("issue.", func(ctx context.Context, m *warren.Message) error { return warren.Permanent(errBoom) })
	start(t, c)
	msg, err := amqpx.EventPublishing(event("plane-ev-1", "issue.updated"))
	if err != nil {
		t.Fatal(err)
	}
	msg.MessageId, msg.Type = "", "" // as Plane publishes
	newPublisher(t).raw(c.Topology().Exchange, msg)

	testenv.WaitFor(t, 60*time.Second, "the dead-lettered log line", func() bool { return logs.has("dead-lettered") })
	var line string
	for l := range strings.Lines(logs.String()) {
		if strings.Contains(l, "dead-lettered") {
			line = l
		}
	}
	for _, want := range []string{"event_id=plane-ev-1", "event_type=issue.updated"} {
		if !strings.Contains(line, want) {
			t.Errorf("dead-letter log line lacks %s:\n%s", want, line)
		}
	}
}

// A Plane message that does not decode as an event (no event_id; an
// event_type that is not a string) is dead-lettered as undecodable, and
// its log line still names it by what its body says: with no message_id
// or type property, that is all an operator has to find it by.
func TestUndecodableDeadLetterLogNamesWhatTheBodySays(t *testing.T) {
	t.Parallel()
	var logs *logLines
	c := newConsumer(t, func(cfg *consumer.Config) { logs = captureLog(t, cfg) })
	c.HandleFunc("", func(ctx context.Context, m *warren.Message) error { return nil })
	start(t, c)
	pub := newPublisher(t)
	for _, body := range []string{
		`{"event_type": "issue.updated", "entity_id": "e-1", "payload": {"data": {}}}`,
		`{"event_id": "plane-ev-2", "event_type": 42, "payload": {"data": {}}}`,
	} {
		pub.raw(c.Topology().Exchange, amqp.Publishing{Body: []byte(body)}) // no properties, as Plane's
	}

	// The line is written after the dead letter is counted: wait for it.
	var lines []string
	testenv.WaitFor(t, 60*time.Second, "two dead-letter log lines", func() bool {
		lines = lines[:0]
		for l := range strings.Lines(logs.String()) {
			if strings.Contains(l, "dead-lettered") {
				lines = append(lines, l)
			}
		}
		return len(lines) >= 2
	})
	for _, want := range [][]string{
		{`event_id=""`, "event_type=issue.updated", "class=undecodable", "event_id is missing"},
		{"event_id=plane-ev-2", `event_type=""`, "class=undecodable", "event_type must be a string"},
	} {
		if !slices.ContainsFunc(lines, func(l string) bool {
			return !slices.ContainsFunc(want, func(w string) bool { return !strings.Contains(l, w) })
		}) {
			t.Errorf("no dead-letter log line with %q:\n%s", want, strings.Join(lines, ""))
		}
	}
}

// An event_id of more than 255 bytes (a producer's 1 MiB id was handled as
// an event) cannot be the AMQP message_id warren publishes it under, and
// would be a dedup key of any size: it is dead-lettered at once as
// undecodable, saying so, and the handler never sees it.
func TestOverlongEventIDIsDeadAtOnce(t *testing.T) {
	t.Parallel()
	c := newConsumer(t, nil)
	rec := newRecorder()
	c.HandleFunc("workitem.", func(_ context.Context, m *warren.Message) error { rec.record(m); return nil })
	start(t, c)
	topo := c.Topology()
	id := strings.Repeat("i", 4096)
	newPublisher(t).raw(topo.Exchange, amqp.Publishing{
		ContentType: "application/json",
		Body:        []byte(`{"event_id":"` + id + `","event_type":"workitem.created"}`),
	})
	d := getOne(t, testenv.Channel(t), topo.DLQ, 60*time.Second)
	meta := dlq.ParseMetadata(d.Headers)
	if meta.Class != dlq.ClassUndecodable || meta.Attempts != 1 || !strings.Contains(meta.Error, "event_id is 4096 bytes, longer than the 255") {
		t.Errorf("dead letter class %q after %d attempts, error %.200q; want undecodable after 1, saying why", meta.Class, meta.Attempts, meta.Error)
	}
	if n := rec.distinct(); n != 0 {
		t.Errorf("the handler ran for it (%d events)", n)
	}
}

// contractSet compiles cs or fails t.
func contractSet(t *testing.T, cs ...contract.Contract) *contract.Set {
	t.Helper()
	s, err := contract.NewSet(cs...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
