package consumer_test

import (
	"bytes"
	"context"
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

// A dead message that an operator moves back to its origin queue with its
// headers (a shovel from the management UI, `warren dlq export` then
// `import --to`) carries an x-death naming that queue. RabbitMQ drops a
// message, without a trace, when it would dead-letter it into a queue its
// x-death already names with no rejection on the way: a retry tier
// dead-letters back to the origin queue, so on the first retry the message
// vanished, its original already acked. It must instead be handled again,
// through every tier as often as its attempts need, and end done.
func TestDeadMessageMovedBackToItsQueueSurvivesRetries(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		move func(t *testing.T, conn *amqp.Connection, topo consumer.Topology)
		// handle returns the handler's verdict on the nth call (from 1).
		handle func(n int) error
		calls  int
	}{
		{name: "shovel/fail once", move: shovel, handle: failFirst(1), calls: 2},
		{name: "import/fail once", move: importTo, handle: failFirst(1), calls: 2},
		{name: "shovel/defer once", move: shovel, handle: func(n int) error {
			if n == 1 {
				return warren.Defer(0, "busy elsewhere")
			}
			return nil
		}, calls: 2},
		// Three failures through one tier: the same tier three times.
		{name: "shovel/fail thrice", move: shovel, handle: failFirst(3), calls: 4},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tweak := func(cfg *consumer.Config) {
				cfg.RetryDelays = []time.Duration{200 * time.Millisecond}
				cfg.MaxAttempts = 4
			}
			// A first consumer declares the topology and stops, so the
			// message can expire in the queue with nobody consuming it.
			declarer := newConsumer(t, tweak)
			declarer.HandleFunc("", func(context.Context, *warren.Message) error { return nil })
			if err := start(t, declarer)(); err != nil {
				t.Fatal(err)
			}
			topo := declarer.Topology()
			conn := testenv.AMQPConn(t)
			ch := testenv.Channel(t)
			msg, err := amqpx.EventPublishing(event("back", "workitem.updated"))
			if err != nil {
				t.Fatal(err)
			}
			msg.Expiration = "1"
			newPublisher(t).raw(topo.Exchange, msg)
			testenv.WaitFor(t, 10*time.Second, "the event to expire into "+topo.DLQ, func() bool {
				return testenv.QueueDepth(t, ch, topo.DLQ) == 1
			})
			tc.move(t, conn, topo)

			rec := newRecorder()
			var deathsSeen []int
			var last dlq.Metadata
			c, err := consumer.New(declarer.Config())
			if err != nil {
				t.Fatal(err)
			}
			c.HandleFunc("", func(ctx context.Context, m *warren.Message) error {
				rec.mu.Lock()
				last = dlq.ParseMetadata(m.Headers)
				deathsSeen = append(deathsSeen, len(last.Deaths))
				rec.mu.Unlock()
				rec.record(m)
				return tc.handle(rec.count(m.Event.ID))
			})
			start(t, c)
			testenv.WaitFor(t, 30*time.Second, "the moved-back event to end done", func() bool { return c.Stats().Done == 1 })
			// Exactly the calls its verdicts need, unless a retry's publish
			// timed out on a busy machine and the delivery came back.
			s := c.Stats()
			if n := rec.count("back"); n < tc.calls || (n > tc.calls && s.Requeued == 0) {
				t.Errorf("handled %d times, want %d", n, tc.calls)
			}
			if s.DeadLettered != 0 {
				t.Errorf("stats %+v, want the event done and nothing dead", s)
			}
			for _, q := range topo.Queues() {
				if n := testenv.QueueDepth(t, ch, q); n != 0 {
					t.Errorf("%s holds %d messages, want none", q, n)
				}
			}
			// The broker's death record does not pile up: each arrival
			// carries at most the one retry-tier hop that brought it.
			rec.mu.Lock()
			defer rec.mu.Unlock()
			for i, n := range deathsSeen[1:] {
				if n > 1 {
					t.Errorf("call %d saw %d x-death entries, want at most the tier's", i+2, n)
				}
			}
			// What the stripped x-death said is kept in warren's headers.
			if fd := last.FirstDeath; fd.Reason != "expired" || fd.Queue != topo.Queue || fd.Time.IsZero() {
				t.Errorf("the last call's first death is %+v, want the expiry in %s", fd, topo.Queue)
			}
		})
	}
}

func failFirst(k int) func(n int) error {
	return func(n int) error {
		if n <= k {
			return errBoom
		}
		return nil
	}
}

// shovel moves the dead message back the way the management UI's shovel
// does: taken off the DLQ and published to the queue, every header kept.
func shovel(t *testing.T, conn *amqp.Connection, topo consumer.Topology) {
	t.Helper()
	d := getOne(t, testenv.Channel(t), topo.DLQ, 10*time.Second)
	if md := dlq.ParseMetadata(d.Headers); md.Class != dlq.ClassExpired || len(md.Deaths) == 0 || md.Deaths[0].Queue != topo.Queue {
		t.Fatalf("the dead message's metadata %+v does not record that it expired in %s", md, topo.Queue)
	}
	testenv.PublishInOrder(t, conn, topo.Queue, []amqp.Publishing{testenv.AsPublishing(d)})
}

// importTo moves it back with `warren dlq export` and `import --to`.
func importTo(t *testing.T, conn *amqp.Connection, topo consumer.Topology) {
	t.Helper()
	ctx := context.Background()
	q, err := dlqtool.Open(ctx, conn, topo.DLQ)
	if err != nil {
		t.Fatal(err)
	}
	var file bytes.Buffer
	if _, err := q.Export(ctx, &file, dlqtool.ExportOptions{}); err != nil {
		t.Fatal(err)
	}
	msgs, err := dlqtool.ReadMessages(&file)
	if err != nil {
		t.Fatal(err)
	}
	if got := testenv.Drain(t, conn, topo.DLQ); len(got) != 1 {
		t.Fatalf("drained %d messages from the DLQ, want the one exported", len(got))
	}
	if _, err := q.Import(ctx, msgs, dlqtool.ImportOptions{To: topo.Queue}); err != nil {
		t.Fatal(err)
	}
}
