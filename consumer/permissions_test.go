package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/consumer"
	"github.com/warrenmq/warren/dlqtool"
	"github.com/warrenmq/warren/internal/amqpx"
	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/internal/testenv/localrabbit"
	"github.com/warrenmq/warren/relay"
)

// brokerAccount is one row of SECURITY.md's "Broker permissions" table:
// the regular expressions `rabbitmqctl set_permissions` takes.
type brokerAccount struct {
	who                    string // the table's first column
	configure, write, read string
}

// brokerPermissions is SECURITY.md's "Broker permissions" table as code,
// for the event exchange and one consumer: what each party needs, and no
// more. TestBrokerPermissionsWork proves it on a real broker;
// TestBrokerPermissionsDocumented keeps the table equal to it for the
// doc's example names.
//
// Why each resource (RabbitMQ's access-control rules, each checked by the
// test):
//   - exchange.declare needs configure on the exchange even when it exists
//     with the same arguments: the relay and the consumer both declare the
//     event exchange.
//   - queue.declare of a queue with a dead-letter exchange needs read on
//     the queue and write on that exchange: the consumer's queue
//     dead-letters to its .dlx, its retry tiers to the default exchange.
//   - queue.bind needs write on the queue and read on the exchange.
//   - basic.publish needs write on the exchange (the default exchange is
//     amq.default); basic.consume needs read on the queue; a passive
//     queue.declare (dlqtool's counts) needs nothing.
func brokerPermissions(exchange, consumerName string) (producer, consumerAccount, operator brokerAccount) {
	x, c := regexp.QuoteMeta(exchange), regexp.QuoteMeta(consumerName)
	producer = brokerAccount{
		who:       "producer (the relay, or an application publishing directly)",
		configure: "^" + x + "$",
		write:     "^" + x + "$",
		read:      "^$",
	}
	consumerAccount = brokerAccount{
		who:       "consumer `" + consumerName + "`",
		configure: "^(" + x + "|" + c + "|" + c + `\.(dlx|dlq|retry\..+))$`,
		write:     `^(amq\.default|` + c + "|" + c + `\.(dlx|dlq))$`,
		read:      "^(" + x + "|" + c + "|" + c + `\.(dlx|retry\..+))$`,
	}
	operator = brokerAccount{
		who:       "operator (`warren dlq`)",
		configure: "^$",
		write:     `^amq\.default$`,
		read:      `^.*\.dlq$`,
	}
	return producer, consumerAccount, operator
}

// TestBrokerPermissionsDocumented: SECURITY.md's table shows exactly the
// regular expressions TestBrokerPermissionsWork proves.
func TestBrokerPermissionsDocumented(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../SECURITY.md")
	if err != nil {
		t.Fatal(err)
	}
	producer, consumerAccount, operator := brokerPermissions("warren.events", "webhook")
	for _, a := range []brokerAccount{producer, consumerAccount, operator} {
		cell := func(re string) string { return "`" + strings.ReplaceAll(re, "|", `\|`) + "`" }
		row := fmt.Sprintf("| %s | %s | %s | %s |", a.who, cell(a.configure), cell(a.write), cell(a.read))
		if !strings.Contains(string(doc), row+"\n") {
			t.Errorf("SECURITY.md lacks the row\n%s", row)
		}
	}
}

// TestBrokerPermissionsWork gives the three parties of SECURITY.md's
// table exactly its permissions on a private node and shows that each can
// do its work (the relay publishes; the consumer declares, probes the
// broker's message size limit, consumes, retries through a tier and
// dead-letters; the operator counts, replays into the consumer's queue and
// purges) and that a producer cannot write where warren believes failure
// headers: the default exchange and the consumer's dead-letter exchange.
func testBrokerPermissionsWork(t *testing.T) {
	node := localrabbit.SharedLane(t, usersLane)
	exchange, consumerName := testenv.Name(t, "ex"), testenv.Name(t, "c")
	producer, consumerAccount, operator := brokerPermissions(exchange, consumerName)
	producerURL := addBrokerUser(t, node, producer)
	consumerURL := addBrokerUser(t, node, consumerAccount)
	operatorURL := addBrokerUser(t, node, operator)

	// The consumer: every attempt fails, so an event goes once through
	// the retry tier and then to the DLQ.
	var log *logLines
	c := consumerAt(t, consumerURL, func(cfg *consumer.Config) {
		cfg.Name, cfg.Exchange = consumerName, exchange
		cfg.RetryDelays, cfg.MaxAttempts = []time.Duration{100 * time.Millisecond}, 2
		log = captureLog(t, cfg)
	})
	deleteTopologyAfter(t, node, c.Topology())
	var attempts atomic.Int64
	c.HandleFunc("", func(context.Context, *warren.Message) error {
		attempts.Add(1)
		return errors.New("downstream refused")
	})
	stopConsumer := start(t, c)
	// The size probe publishes to the default exchange on a connection of
	// its own: with write on amq.default it is answered, not refused.
	if log.has("could not read the broker's max_message_size") {
		t.Error("the consumer's size probe failed under its permissions (see the log)")
	}

	// The producer: the real relay, which declares the exchange and
	// publishes to it.
	ob := testenv.NewOutboxTable(t)
	ids := []string{"perm-1", "perm-2"}
	for _, id := range ids {
		ob.Publish(testenv.OutboxEvent(id))
	}
	r, err := relay.New(relay.Config{
		DatabaseURL: testenv.DatabaseURL(t), AMQPURL: producerURL, Exchange: exchange,
		Table: ob.Table.Name(), Name: "perm-relay", Logger: c.Config().Logger,
	})
	if err != nil {
		t.Fatal(err)
	}
	testenv.RunInBackground(t, r.Run)

	admin, err := amqpx.Dial(context.Background(), node.URL(), amqpx.DialOptions{Name: t.Name() + " admin"})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	depth := func(queue string) int {
		ch, err := admin.Channel()
		if err != nil {
			t.Fatal(err)
		}
		defer ch.Close()
		return testenv.QueueDepth(t, ch, queue)
	}
	topo := c.Topology()
	testenv.WaitFor(t, time.Minute, "both events dead-lettered after a retry", func() bool { return depth(topo.DLQ) == len(ids) })
	if n := attempts.Load(); n != int64(2*len(ids)) {
		t.Errorf("handler ran %d times, want %d (two attempts per event)", n, 2*len(ids))
	}
	if err := stopConsumer(); err != nil {
		t.Fatalf("consumer Run: %v", err)
	}

	// The producer is refused where a forged message would be believed.
	producerConn, err := amqpx.Dial(context.Background(), producerURL, amqpx.DialOptions{Name: t.Name() + " producer"})
	if err != nil {
		t.Fatal(err)
	}
	defer producerConn.Close()
	forged := amqp.Publishing{Headers: amqp.Table{"x-warren-attempts": int32(99)}, Body: []byte(`{}`)}
	for _, target := range []struct{ exchange, key string }{{"", topo.Queue}, {topo.DLX, ""}} {
		err := publishOnce(producerConn, target.exchange, target.key, forged)
		var ae *amqp.Error
		if !errors.As(err, &ae) || ae.Code != amqp.AccessRefused {
			t.Errorf("producer publishing to exchange %q, key %q: %v; want 403 ACCESS_REFUSED", target.exchange, target.key, err)
		}
	}
	if n := depth(topo.Queue); n != 0 {
		t.Errorf("consumer's queue holds %d messages after the producer's refused publishes, want 0", n)
	}

	// The operator: stats, replay of one into the consumer's queue, purge.
	operatorConn, err := amqpx.Dial(context.Background(), operatorURL, amqpx.DialOptions{Name: t.Name() + " operator"})
	if err != nil {
		t.Fatal(err)
	}
	defer operatorConn.Close()
	ctx := context.Background()
	q, err := dlqtool.Open(ctx, operatorConn, consumerName)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := q.Stats(ctx, dlqtool.StatsOptions{}); err != nil || st.Total != len(ids) {
		t.Fatalf("operator's Stats = %+v, %v; want %d messages", st, err, len(ids))
	}
	if res, err := q.Replay(ctx, dlqtool.ReplayOptions{Limit: 1}); err != nil || res.Queues[topo.Queue] != 1 {
		t.Fatalf("operator's Replay = %+v, %v; want 1 message into %s", res, err, topo.Queue)
	}
	if n := depth(topo.Queue); n != 1 {
		t.Errorf("consumer's queue holds %d messages after the replay, want 1", n)
	}
	if _, err := q.Purge(ctx, dlqtool.PurgeOptions{}); err != nil {
		t.Fatalf("operator's Purge: %v", err)
	}
	if n, err := q.Count(ctx); err != nil || n != 0 {
		t.Errorf("DLQ after the purge: %d messages, %v; want 0", n, err)
	}
}

// addBrokerUser creates a user with a's permissions on node's default
// vhost, deleted when t ends, and returns its AMQP URL.
func addBrokerUser(t *testing.T, node *localrabbit.Node, a brokerAccount) string {
	t.Helper()
	return node.AddUser(t, testenv.Name(t, "u"), a.configure, a.write, a.read).URL()
}

// publishOnce publishes msg on a fresh confirm-mode channel of conn and
// returns nil once the broker confirms it, or the error that closed the
// channel (a refused publish).
func publishOnce(conn *amqp.Connection, exchange, key string, msg amqp.Publishing) error {
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	closed := ch.NotifyClose(make(chan *amqp.Error, 1))
	if err := ch.Confirm(false); err != nil {
		return err
	}
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, 1))
	_ = ch.Publish(exchange, key, false, false, msg) // a refusal closes the channel: read below
	select {
	case c, ok := <-confirms:
		if ok && c.Ack {
			return nil
		}
		if ok {
			return errors.New("nacked")
		}
		return <-closed
	case e := <-closed:
		return e
	case <-time.After(30 * time.Second):
		return errors.New("no answer from the broker within 30s")
	}
}

// A broker that refuses a consumer it let in before (a password changed
// under a running service, an auth backend failing) does not end Run, as
// a refusal at the start does: it retries, loudly, and consumes again
// once the broker lets it in.
func testRefusedReconnectIsRetried(t *testing.T) {
	node := localrabbit.SharedLane(t, usersLane)
	user := node.AddUser(t, testenv.Name(t, "u"), ".*", ".*", ".*")
	logs := &logLines{out: t.Output()}
	c := consumerAt(t, user.URL(), func(cfg *consumer.Config) {
		cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
		cfg.ReconnectMaxDelay = time.Second
	})
	deleteTopologyAfter(t, node, c.Topology())
	c.HandleFunc("", func(context.Context, *warren.Message) error { return nil })
	stop := start(t, c)

	user.LockOut(t)
	testenv.WaitFor(t, time.Minute, "the consumer to be refused and retry", func() bool {
		return strings.Contains(logs.String(), "refuses the consumer it let in before")
	})
	user.LetIn(t)
	testenv.WaitFor(t, time.Minute, "the consumer to consume again", func() bool {
		return c.Stats().Reconnects >= 1 && c.Health().Ready
	})
	if err := stop(); err != nil {
		t.Errorf("Run = %v, want nil after a stop", err)
	}
}
