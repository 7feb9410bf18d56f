package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/consumer"
	"github.com/warrenmq/warren/dlq"
	"github.com/warrenmq/warren/dlqtool"
	"github.com/warrenmq/warren/internal/amqpx"
	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/internal/testenv/localrabbit"
)

// seqEvent is event seq of entity, its sequence number in the payload.
func seqEvent(entity string, seq int) warren.Event {
	ev := event(fmt.Sprintf("%s-%03d", entity, seq), "workitem.updated")
	ev.EntityID = entity
	ev.Payload.Data = fmt.Appendf(nil, `{"seq":%d}`, seq)
	return ev
}

func seqOf(t testing.TB, m *warren.Message) int {
	var data struct{ Seq int }
	if err := m.Event.Payload.DecodeData(&data); err != nil {
		t.Error(err)
	}
	return data.Seq
}

// publishInOrder publishes msgs to exchange one after the other on one
// channel, so that the broker keeps their order, and waits for every
// confirm.
func publishInOrder(t testing.TB, exchange string, msgs []amqp.Publishing) {
	t.Helper()
	publishInOrderOn(t, testenv.Channel(t), exchange, msgs)
}

// publishInOrderOn is publishInOrder on ch.
func publishInOrderOn(t testing.TB, ch *amqp.Channel, exchange string, msgs []amqp.Publishing) {
	t.Helper()
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, len(msgs)))
	for _, msg := range msgs {
		if err := ch.PublishWithContext(context.Background(), exchange, "", false, false, msg); err != nil {
			t.Fatal(err)
		}
	}
	for range msgs {
		select {
		case c := <-confirms:
			if !c.Ack {
				t.Fatalf("publish %d nacked", c.DeliveryTag)
			}
		case <-time.After(60 * time.Second):
			t.Fatal("no confirm within 60s")
		}
	}
}

func publishingsOf(t testing.TB, evs ...warren.Event) []amqp.Publishing {
	out := make([]amqp.Publishing, len(evs))
	for i, ev := range evs {
		msg, err := amqpx.EventPublishing(ev)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = msg
	}
	return out
}

func depths(t testing.TB, queues []string) []int {
	ch := testenv.Channel(t)
	out := make([]int, len(queues))
	for i, q := range queues {
		out[i] = testenv.QueueDepth(t, ch, q)
	}
	return out
}

// The topology: the hash exchange bound to the events exchange, partition
// queues with single active consumer; declaring it again is a no-op, and a
// conflict is a TopologyError, fatal at once.
func TestPartitionsTopology(t *testing.T) {
	t.Parallel()
	for _, qt := range []consumer.QueueType{consumer.Classic, consumer.Quorum} {
		t.Run(string(qt), func(t *testing.T) {
			t.Parallel()
			c := newConsumer(t, func(cfg *consumer.Config) { cfg.Partitions, cfg.QueueType = 4, qt })
			start(t, c)()
			cfg, topo := c.Config(), c.Topology()

			again := consumerAt(t, cfg.URL, func(c2 *consumer.Config) { *c2 = cfg })
			if err := start(t, again)(); err != nil {
				t.Fatalf("declaring it again: %v", err)
			}
			ch := testenv.Channel(t)
			for _, q := range topo.PartitionQueues {
				args := amqp.Table{"x-single-active-consumer": true, "x-dead-letter-exchange": topo.DLX, "x-message-ttl": int64(time.Hour / time.Millisecond)}
				if qt == consumer.Quorum {
					args["x-queue-type"], args["x-dead-letter-strategy"], args["x-overflow"] = "quorum", "at-least-once", "reject-publish"
				}
				if _, err := ch.QueueDeclare(q, true, false, false, false, args); err != nil {
					t.Fatalf("partition queue %s is not declared with %v: %v", q, args, err)
				}
			}
			if err := ch.ExchangeDeclarePassive(topo.PartitionExchange, "x-consistent-hash", true, false, false, false, nil); err != nil {
				t.Fatal(err)
			}

			other := consumer.Classic
			if qt == consumer.Classic {
				other = consumer.Quorum
			}
			for name, tweak := range map[string]func(*consumer.Config){
				"another queue type": func(c2 *consumer.Config) { *c2 = cfg; c2.QueueType = other },
				"fewer partitions":   func(c2 *consumer.Config) { *c2 = cfg; c2.Partitions = 2 },
			} {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				err := consumerAt(t, cfg.URL, tweak).Run(ctx)
				cancel()
				var te *consumer.TopologyError
				if !errors.As(err, &te) {
					t.Fatalf("%s: Run returned %v, want a TopologyError", name, err)
				}
				t.Logf("%s: %v", name, err)
				if name == "fewer partitions" && te.Name != consumer.PartitionQueueName(cfg.Name, 2) {
					t.Errorf("%s: error names %q", name, te.Name)
				}
				if name == "another queue type" && te.Argument != "x-queue-type" {
					t.Errorf("%s: error names argument %q", name, te.Argument)
				}
			}
		})
	}
}

// What RabbitMQ 3.10's consistent-hash exchange does with a message
// without the entity header (Plane's publisher sets none): it routes it
// like one whose header is empty, all of them to one and the same
// partition, none dropped. Events with the header spread.
func TestPartitionsMissingHeader(t *testing.T) {
	t.Parallel()
	c := newConsumer(t, func(cfg *consumer.Config) { cfg.Partitions = 4 })
	start(t, c)() // declares, then stops: the messages stay in the queues
	topo := c.Topology()

	var bare []amqp.Publishing
	for i := range 100 {
		bare = append(bare, amqp.Publishing{Body: fmt.Appendf(nil, `{"n":%d}`, i), MessageId: fmt.Sprint(i)})
	}
	publishInOrder(t, topo.Exchange, bare)
	got := depths(t, topo.PartitionQueues)
	noHeader := -1
	for i, n := range got {
		switch n {
		case 0:
		case 100:
			noHeader = i
		default:
			t.Fatalf("100 messages without the header went %v", got)
		}
	}
	if noHeader < 0 {
		t.Fatalf("100 messages without the header went %v", got)
	}
	t.Logf("all messages without the header went to partition %d: %v", noHeader, got)

	empty := amqp.Publishing{Headers: amqp.Table{warren.HeaderEntityID: ""}, Body: []byte(`{}`)}
	publishInOrder(t, topo.Exchange, []amqp.Publishing{empty})
	if after := depths(t, topo.PartitionQueues); after[noHeader] != 101 {
		t.Errorf("an empty header went %v, want with the missing ones to partition %d", after, noHeader)
	}

	var evs []warren.Event
	for i := range 200 {
		evs = append(evs, seqEvent(fmt.Sprintf("ent-%d", i), 1))
	}
	publishInOrder(t, topo.Exchange, publishingsOf(t, evs...))
	spread := depths(t, topo.PartitionQueues)
	for i, n := range spread {
		if i != noHeader && n == 0 {
			t.Errorf("200 entities left partition %d empty: %v", i, spread)
		}
	}
	t.Logf("then 200 entities with the header: %v", spread)
}

// A transient failure holds its partition: the event is tried in place
// MaxAttempts times, the events after it waiting, then goes to the DLQ
// (class exhausted); a permanent failure goes there at once; the events
// after each then flow, in order.
func TestPartitionFailureHoldsPartition(t *testing.T) {
	t.Parallel()
	c := newConsumer(t, func(cfg *consumer.Config) {
		cfg.Partitions, cfg.MaxAttempts = 1, 3
		cfg.RetryDelays = []time.Duration{time.Millisecond, 2 * time.Millisecond}
	})
	var mu sync.Mutex
	var handled []string
	done := make(chan struct{})
	c.HandleFunc("", func(ctx context.Context, m *warren.Message) error {
		seq := seqOf(t, m)
		mu.Lock()
		handled = append(handled, fmt.Sprintf("%s#%d/%d", m.Event.EntityID, seq, m.Attempt))
		mu.Unlock()
		switch {
		case m.Event.EntityID == "x" && seq == 2:
			return errors.New("flaky dependency")
		case m.Event.EntityID == "x" && seq == 4:
			return warren.Permanent(errors.New("bad event"))
		case m.Event.EntityID == "y" && seq == 3:
			close(done)
		}
		return nil
	})
	start(t, c)
	topo := c.Topology()
	var evs []warren.Event
	for seq := 1; seq <= 5; seq++ {
		evs = append(evs, seqEvent("x", seq))
	}
	for seq := 1; seq <= 3; seq++ {
		evs = append(evs, seqEvent("y", seq))
	}
	publishInOrder(t, topo.Exchange, publishingsOf(t, evs...))
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("the last event was not handled")
	}
	mu.Lock()
	got := strings.Join(handled, " ")
	mu.Unlock()
	if want := "x#1/1 x#2/1 x#2/2 x#2/3 x#3/1 x#4/1 x#5/1 y#1/1 y#2/1 y#3/1"; got != want {
		t.Errorf("handled\n %s\nwant\n %s", got, want)
	}
	ch := testenv.Channel(t)
	for _, want := range []struct {
		id    string
		class dlq.Class
		tries int
	}{{"x-002", dlq.ClassExhausted, 3}, {"x-004", dlq.ClassPermanent, 1}} {
		d := getOne(t, ch, topo.DLQ, 30*time.Second)
		md := dlq.ParseMetadata(d.Headers)
		if d.MessageId != want.id || md.Class != want.class || md.Attempts != want.tries || md.OriginQueue != topo.PartitionQueues[0] {
			t.Errorf("dead letter %s class %s attempts %d origin %q, want %s %s %d %q", d.MessageId, md.Class, md.Attempts, md.OriginQueue,
				want.id, want.class, want.tries, topo.PartitionQueues[0])
		}
	}
	if s := c.Stats(); s.Retried != 2 || s.DeadLettered != 2 || s.ActivePartitions != 1 || s.PartitionsTaken != 1 {
		t.Errorf("stats %+v", s)
	}
	if h := c.Health(); len(h.ActivePartitions) != 1 || h.ActivePartitions[0] != 0 {
		t.Errorf("health's active partitions %v, want [0]", h.ActivePartitions)
	}
}

// A broker without the consistent-hash plugin (the private node has no
// plugins) fails Run at once with an error that says to enable it, and
// nothing is declared.
func testPartitionsWithoutPlugin(t *testing.T) {
	node := localrabbit.Shared(t)
	c := newNodeConsumer(t, node, func(cfg *consumer.Config) { cfg.Partitions = 2 })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := c.Run(ctx)
	if !errors.Is(err, consumer.ErrNoConsistentHash) || ctx.Err() != nil {
		t.Fatalf("Run returned %v, want ErrNoConsistentHash before the deadline", err)
	}
	if !strings.Contains(err.Error(), "rabbitmq-plugins enable rabbitmq_consistent_hash_exchange") {
		t.Errorf("the error does not say how to enable the plugin: %v", err)
	}
	conn, err := amqpx.Dial(context.Background(), node.URL(), amqpx.DialOptions{Name: t.Name()})
	if err != nil {
		t.Fatal(err)
	}
	defer amqpx.CloseConnection(conn, 5*time.Second)
	for _, q := range c.Topology().Queues() {
		ch, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ch.QueueDeclarePassive(q, true, false, false, false, nil); err == nil {
			t.Errorf("queue %s was declared", q)
		}
	}
}

// `warren dlq replay` of a partitioned consumer's DLQ, with no --to,
// sends each dead event back through the consumer's partition exchange to
// its entity's partition, where the consumer handles it again; no other
// consumer of the fanout exchange sees it, and one that dies again is
// dead-lettered with its replay counted.
func TestPartitionsReplayFromTheDLQ(t *testing.T) {
	t.Parallel()
	var fixed atomic.Bool
	handled := make(chan string, 16)
	c := newConsumer(t, func(cfg *consumer.Config) { cfg.Partitions = 4 })
	c.HandleFunc("", func(ctx context.Context, m *warren.Message) error {
		if !fixed.Load() || m.Event.EntityID == "c" {
			return warren.Permanent(errors.New("bad deploy"))
		}
		handled <- m.Event.ID
		return nil
	})
	start(t, c)
	topo := c.Topology()
	ch := testenv.Channel(t)
	sibling := testenv.Name(t, "sibling")
	testenv.CleanupQueues(t, sibling)
	if _, err := ch.QueueDeclare(sibling, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(sibling, "", topo.Exchange, false, nil); err != nil {
		t.Fatal(err)
	}
	evs := []warren.Event{seqEvent("a", 1), seqEvent("b", 1), seqEvent("c", 1)}
	publishInOrder(t, topo.Exchange, publishingsOf(t, evs...))
	testenv.WaitFor(t, 60*time.Second, "three dead letters", func() bool { return testenv.QueueDepth(t, ch, topo.DLQ) == 3 })
	testenv.Drain(t, testenv.AMQPConn(t), sibling) // the first publish's copies

	fixed.Store(true)
	q, err := dlqtool.Open(context.Background(), testenv.AMQPConn(t), c.Config().Name)
	if err != nil {
		t.Fatal(err)
	}
	res, err := q.Replay(context.Background(), dlqtool.ReplayOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Done != 3 || res.Queues[topo.PartitionExchange] != 3 || res.ForeignOrigin != 0 {
		t.Fatalf("replay %+v: want 3 through %s, none with a foreign origin (a partition queue is home)", res, topo.PartitionExchange)
	}
	got := map[string]bool{}
	for range evs[:2] {
		select {
		case id := <-handled:
			got[id] = true
		case <-time.After(60 * time.Second):
			t.Fatalf("handled %v after the replay, want a's and b's", got)
		}
	}
	again := getOne(t, ch, topo.DLQ, 60*time.Second)
	if md := dlq.ParseMetadata(again.Headers); again.MessageId != evs[2].ID || md.Replays != 1 || md.OriginQueue == "" {
		t.Errorf("dead again: %s with replays %d, origin %q; want %s with 1 replay", again.MessageId, md.Replays, md.OriginQueue, evs[2].ID)
	}
	if n := testenv.QueueDepth(t, ch, sibling); n != 0 {
		t.Errorf("the replay reached another consumer of the exchange: %d messages", n)
	}
}
