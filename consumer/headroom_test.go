package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/consumer"
	"github.com/warrenmq/warren/dlq"
	"github.com/warrenmq/warren/dlqtool"
	"github.com/warrenmq/warren/internal/amqpx"
	"github.com/warrenmq/warren/internal/testenv"
)

// roomMessages are events of type workitem.created whose content header
// is slack bytes below the filter's room (frame_max - 8 KiB), which it
// reads as they are.
func roomMessages(t *testing.T, slacks ...int) []amqp.Publishing {
	ev, err := amqpx.EventPublishing(event("room", "workitem.created"))
	if err != nil {
		t.Fatal(err)
	}
	const room = 131072 - 8192
	var out []amqp.Publishing
	for _, slack := range slacks {
		msg := amqp.Publishing{ContentType: "application/json", MessageId: "m", Type: "workitem.created", Body: ev.Body}
		// frame = 8 + payload; payload = 14 + ctype + headers + id + type
		fixed := 8 + 14 + (1 + len(msg.ContentType)) + 4 + (1 + 3 + 1 + 4) + (1 + 1) + (1 + len(msg.Type))
		msg.Headers = amqp.Table{"big": strings.Repeat("x", room-slack-fixed)}
		out = append(out, msg)
	}
	return out
}

// reason is a handler's error as long as a dead letter records (2,048
// bytes): a webhook's response, say.
var reason = strings.Repeat("e", 2048)

// Headers near frame_max - 8 KiB (legitimate producers' headers of
// 115-120 KiB) dead-lettered with warren's record added: the copy would be
// over what the client reads, so the consumer drops the producer's entries
// from it (dlq.Fit, marked dlq.HeaderDropped) and keeps its record. Before,
// the copy went out whole and every warren client reading the DLQ got the
// table replaced by the filter's marker: class, error, attempts and origin
// lost, the message read as "undecodable".
func TestDeadLetterOfLargeHeadersKeepsItsRecord(t *testing.T) {
	t.Parallel()
	c := newConsumer(t, func(cfg *consumer.Config) { cfg.Prefetch = 1 })
	c.HandleFunc("workitem.", func(context.Context, *warren.Message) error {
		return warren.Permanent(errors.New(reason))
	})
	start(t, c)
	topo := c.Topology()
	p := newPublisher(t)
	for _, msg := range roomMessages(t, 0, 1000, 3000) {
		if err := p.pub.Publish(context.Background(), topo.Exchange, "workitem.created", msg); err != nil {
			t.Fatal(err)
		}
	}
	testenv.WaitFor(t, 60*time.Second, "3 dead letters", func() bool { return c.Stats().DeadLettered >= 3 })
	ch := testenv.Channel(t) // through amqpx.Dial, as every warren tool reads
	for i := range 3 {
		d := getOne(t, ch, topo.DLQ, 10*time.Second)
		m := dlq.ParseMetadata(d.Headers)
		if m.Class != dlq.ClassPermanent || m.Error != reason {
			t.Errorf("dead letter %d reads as class %q, error %q, attempts %d, origin %q", i, m.Class, m.Error, m.Attempts, m.OriginQueue)
		}
	}
}

// The same headers on an event that fails once: its retry copy, with
// warren's record and the broker's x-death added, must come back readable
// and be handled (before, it came back over the filter's room and was
// dead-lettered as undecodable without the handler running again).
func TestRetryOfLargeHeadersIsHandledAgain(t *testing.T) {
	t.Parallel()
	failOnceThenHandled(t, roomMessages(t, 2000)[0], errors.New(reason))
}

// 8,190 header entries are within what amqp091-go reads (8,192). An event
// carrying them that fails once gets warren's record (about ten entries)
// on its retry copy: the consumer drops the producer's entries from the
// copy so that it comes back readable and is handled again (before, it was
// over 8,192 entries and dead-lettered as undecodable, its record lost).
func TestRetryOfHeadersNearTheEntryLimitIsHandledAgain(t *testing.T) {
	t.Parallel()
	msg := roomMessages(t, 100000)[0]
	msg.Headers = amqp.Table{}
	for i := range 8190 {
		msg.Headers[fmt.Sprintf("k%05d", i)] = int32(i)
	}
	failOnceThenHandled(t, msg, errBoom)
}

// failOnceThenHandled publishes msg, an event whose handler fails once
// with err, and checks that its retry comes back to the handler, readable,
// as attempt 2 (its record kept).
func failOnceThenHandled(t *testing.T, msg amqp.Publishing, err error) {
	t.Helper()
	c := newConsumer(t, func(cfg *consumer.Config) {
		cfg.Prefetch = 1
		cfg.RetryDelays = []time.Duration{20 * time.Millisecond}
	})
	var mu sync.Mutex
	var seen []*warren.Message
	c.HandleFunc("workitem.", func(_ context.Context, m *warren.Message) error {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, m)
		if len(seen) == 1 {
			return err
		}
		return nil
	})
	start(t, c)
	topo := c.Topology()
	if err := newPublisher(t).pub.Publish(context.Background(), topo.Exchange, "workitem.created", msg); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 60*time.Second, "the event settled", func() bool { s := c.Stats(); return s.Done+s.DeadLettered >= 1 })
	mu.Lock()
	defer mu.Unlock()
	if s := c.Stats(); s.Done != 1 {
		d := getOne(t, testenv.Channel(t), topo.DLQ, 10*time.Second)
		t.Fatalf("retried once then dead-lettered, not handled (handler calls %d, done %d): %q", len(seen), s.Done, dlq.ParseMetadata(d.Headers).Error)
	}
	if retry := seen[1]; retry.Attempt != 2 || retry.Headers[dlq.HeaderUnreadable] != nil {
		t.Errorf("the retry reached the handler as attempt %d, %s %.200v; want attempt 2, readable",
			retry.Attempt, dlq.HeaderUnreadable, retry.Headers[dlq.HeaderUnreadable])
	}
}

// The dead letter of large headers, replayed with dlqtool after the
// handler is fixed, reaches the handler (before, the replay carried the
// filter's marker and was dead-lettered again at once as undecodable).
func TestReplayOfLargeHeadersReachesTheHandler(t *testing.T) {
	t.Parallel()
	c := newConsumer(t, func(cfg *consumer.Config) { cfg.Prefetch = 1 })
	var mu sync.Mutex
	fixed := false
	calls := 0
	c.HandleFunc("workitem.", func(context.Context, *warren.Message) error {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if !fixed {
			return warren.Permanent(errors.New(reason))
		}
		return nil
	})
	start(t, c)
	topo := c.Topology()
	if err := newPublisher(t).pub.Publish(context.Background(), topo.Exchange, "workitem.created", roomMessages(t, 0)[0]); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 60*time.Second, "the dead letter", func() bool { return c.Stats().DeadLettered >= 1 })
	mu.Lock()
	fixed = true
	mu.Unlock()
	q, err := dlqtool.Open(context.Background(), testenv.AMQPConn(t), c.Config().Name)
	if err != nil {
		t.Fatal(err)
	}
	res, err := q.Replay(context.Background(), dlqtool.ReplayOptions{})
	if err != nil || res.Done != 1 {
		t.Fatalf("replay: %+v, %v", res, err)
	}
	testenv.WaitFor(t, 60*time.Second, "the replay settled", func() bool { s := c.Stats(); return s.Done+s.DeadLettered >= 2 })
	mu.Lock()
	defer mu.Unlock()
	if s := c.Stats(); s.Done != 1 {
		d := getOne(t, testenv.Channel(t), topo.DLQ, 10*time.Second)
		t.Errorf("the replayed event was dead-lettered again (handler calls %d, done %d): %.160q", calls, s.Done, dlq.ParseMetadata(d.Headers).Error)
	}
}

// A producer with
// configure permission on a queue of its own (Q, dead-lettering to the
// consumer's exchange, which it may publish to anyway) publishes into Q a
// message whose CC header brings its content header near frame_max. When
// it expires, the broker copies the CC keys into x-death and delivers a
// content header of more than 2 x frame_max to the consumer: the filter
// rewrites it, reading it in bounded memory, to a header carrying only
// dlq.HeaderUnreadable, and the consumer dead-letters it (before, the filter
// passed it unread, amqp091-go refused it and the connection closed, for
// ever). A message the client cannot read leaves the head within a bounded
// time.
func TestXDeathGrownPastTwiceFrameMaxIsDeadLettered(t *testing.T) {
	t.Parallel()
	c := newConsumer(t, func(cfg *consumer.Config) { cfg.Prefetch = 1; cfg.Channels = 1 })
	rec := newRecorder()
	c.HandleFunc("workitem.", func(_ context.Context, m *warren.Message) error { rec.record(m); return nil })
	start(t, c)
	topo := c.Topology()
	ch := testenv.Channel(t)
	q := testenv.Name(t, "producer-q")
	testenv.CleanupQueues(t, q)
	if _, err := ch.QueueDeclare(q, true, false, false, false, amqp.Table{"x-dead-letter-exchange": topo.Exchange}); err != nil {
		t.Fatal(err)
	}
	p := newPublisher(t)
	if err := p.pub.Publish(context.Background(), "", q, amqp.Publishing{
		MessageId: "cc-big", Expiration: "1", Headers: amqp.Table{"CC": testenv.CCNearFrameMax("cc-big", 16)}, Body: []byte(`{}`),
	}); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 10*time.Second, "the message to expire from "+q, func() bool { return testenv.QueueDepth(t, ch, q) == 0 })
	good := manyEvents(5, "behind", "workitem.updated")
	p.events(topo.Exchange, "", good...)
	deadline := time.Now().Add(30 * time.Second)
	for rec.distinct() < len(good) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if rec.distinct() < len(good) {
		t.Fatalf("after 30s: %d of %d events behind the grown message handled, %d reconnects, %d dead-lettered",
			rec.distinct(), len(good), c.Stats().Reconnects, c.Stats().DeadLettered)
	}
	if s := c.Stats(); s.DeadLettered != 1 || s.Reconnects != 0 {
		t.Errorf("%d dead-lettered, %d reconnects; want the grown message dead-lettered on the one connection", s.DeadLettered, s.Reconnects)
	}
}

// A message on the consumer's queue through the default exchange (an
// operator's script, an application with write rights on amq.default) is
// trusted to carry warren's history, and a dead letter keeps its origin.
// A forged origin of 126 KiB must not be kept at that size: with warren's
// record the dead letter would be over frame_max, the broker would close
// the connection at every attempt, and the message would never leave the
// head of the queue.
func TestAForgedHistoryHeaderOfAnySizeDoesNotWedgeTheQueue(t *testing.T) {
	t.Parallel()
	c := newConsumer(t, func(cfg *consumer.Config) { cfg.Prefetch = 1 })
	c.HandleFunc("workitem.", func(context.Context, *warren.Message) error {
		return warren.Permanent(errors.New(reason))
	})
	start(t, c)
	topo := c.Topology()
	msg := roomMessages(t, 0)[0]
	msg.Headers = amqp.Table{dlq.HeaderOriginRoutingKey: strings.Repeat("k", 126<<10)}
	if err := newPublisher(t).pub.Publish(context.Background(), "", topo.Queue, msg); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 60*time.Second, "the dead letter", func() bool { return c.Stats().DeadLettered >= 1 })
	d := getOne(t, testenv.Channel(t), topo.DLQ, 10*time.Second)
	if m := dlq.ParseMetadata(d.Headers); m.Class != dlq.ClassPermanent || m.Error != reason {
		t.Errorf("dead letter reads as class %q, error %.40q", m.Class, m.Error)
	}
	if _, kept := d.Headers[dlq.HeaderOriginRoutingKey]; kept {
		t.Error("the forged 126 KiB origin routing key was kept")
	}
	if s := c.Stats(); s.Reconnects != 0 {
		t.Errorf("%d reconnects: a copy was refused by the broker", s.Reconnects)
	}
}
