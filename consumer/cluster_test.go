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
	"github.com/warrenmq/warren/internal/amqpx"
	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/internal/testenv/localrabbit"
)

// startCluster runs a private three-node cluster for t.
func startCluster(t *testing.T) *localrabbit.Cluster {
	t.Helper()
	cl, err := localrabbit.StartCluster(context.Background(), t.TempDir(), "cq", 3)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Stop)
	t.Logf("three-node cluster up in %v: %s", cl.Startup.Round(time.Millisecond), cl)
	return cl
}

// clusterClient is a connection to one node of a cluster, for publishing
// and looking at queues from outside the consumer.
type clusterClient struct {
	t    *testing.T
	conn *amqp.Connection
	pub  *amqpx.Publisher
	ch   *amqp.Channel
}

func dialNode(t *testing.T, url string) *clusterClient {
	t.Helper()
	conn, err := amqpx.Dial(context.Background(), url, amqpx.DialOptions{Name: t.Name() + " client"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { amqpx.CloseConnection(conn, 5*time.Second) })
	pub, err := amqpx.NewPublisher(context.Background(), conn, 512)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return &clusterClient{t: t, conn: conn, pub: pub, ch: ch}
}

func (c *clusterClient) publish(exchange string, evs []warren.Event) {
	c.t.Helper()
	(&publisher{t: c.t, pub: c.pub}).events(exchange, "", evs...)
}

func (c *clusterClient) close() { amqpx.CloseConnection(c.conn, 5*time.Second) }

// successes records the events a handler finished, and when the first
// handler that started after a mark finished.
type successes struct {
	mu      sync.Mutex
	done    map[string]int
	changed chan struct{}
	after   time.Time // set by markNow
	first   time.Time // when the first handler that started after it finished
}

func newSuccesses() *successes {
	return &successes{done: map[string]int{}, changed: make(chan struct{}, 1)}
}

func (s *successes) add(id string, started time.Time) {
	s.mu.Lock()
	s.done[id]++
	if !s.after.IsZero() && s.first.IsZero() && started.After(s.after) {
		s.first = time.Now()
	}
	s.mu.Unlock()
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

func (s *successes) markNow() {
	s.mu.Lock()
	s.after, s.first = time.Now(), time.Time{}
	s.mu.Unlock()
}

// resumedAfter is how long after markNow the first handler that started
// after it finished: the time until events flow again.
func (s *successes) resumedAfter() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.first.IsZero() {
		return -1
	}
	return s.first.Sub(s.after)
}

func (s *successes) waitAll(t *testing.T, ids []string, timeout time.Duration) {
	t.Helper()
	deadline := time.After(timeout)
	for {
		s.mu.Lock()
		missing := 0
		for _, id := range ids {
			if s.done[id] == 0 {
				missing++
			}
		}
		s.mu.Unlock()
		if missing == 0 {
			return
		}
		select {
		case <-s.changed:
		case <-deadline:
			t.Fatalf("%d of %d events not handled after %v", missing, len(ids), timeout)
		}
	}
}

func (s *successes) duplicates() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.done {
		n += c - 1
	}
	return n
}

func eventIDs(evs []warren.Event) []string {
	ids := make([]string, len(evs))
	for i, ev := range evs {
		ids[i] = ev.ID
	}
	return ids
}

// A consumer of quorum queues on a three-node cluster, given every node's
// URL, loses nothing while the node that leads its queues (and holds its
// connection) is killed with SIGKILL, comes back, and another node's
// application is stopped: it reconnects to a surviving node by itself, and
// the events waiting in a retry tier when their leader died come back
// through the broker's at-least-once dead-lettering.
func TestQuorumQueuesSurviveNodeLoss(t *testing.T) {
	cl := startCluster(t)
	ctx := context.Background()
	urls := cl.URLs()
	const n = 600
	ok := newSuccesses()
	var failMu sync.Mutex
	failed := map[string]bool{} // every tenth event fails once, to pass through the retry tier
	gate := make(chan struct{})
	var gateOnce sync.Once
	openGate := func() { gateOnce.Do(func() { close(gate) }) }
	t.Cleanup(openGate)
	c := consumerAt(t, strings.Join(urls, ","), func(cfg *consumer.Config) {
		cfg.QueueType = consumer.Quorum
		cfg.RetryDelays = []time.Duration{2 * time.Second}
		cfg.ReconnectMaxDelay = time.Second
	})
	c.HandleFunc("", func(ctx context.Context, m *warren.Message) error {
		started := time.Now()
		if strings.HasSuffix(m.Event.ID, "0") {
			failMu.Lock()
			first := !failed[m.Event.ID]
			failed[m.Event.ID] = true
			failMu.Unlock()
			if first {
				return errors.New("fails once, to wait in the retry tier")
			}
		}
		if strings.HasPrefix(m.Event.ID, "kill-") && !strings.HasSuffix(m.Event.ID, "0") {
			select { // hold handlers mid-stream until the kill
			case <-gate:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		ok.add(m.Event.ID, started)
		return nil
	})
	stop := start(t, c)
	topo := c.Topology()
	leader := waitLeader(t, cl, topo.Queue)
	retryLeader := waitLeader(t, cl, topo.Retry[0].Queue)
	t.Logf("queue %s led by node %d, retry tier by node %d", topo.Queue, leader, retryLeader)

	// 1. Kill -9 the node that leads the queue, with handlers in flight and
	// failed events waiting in the retry tier.
	pubNode := (leader + 1) % len(urls)
	client := dialNode(t, urls[pubNode])
	killed := manyEvents(n, "kill", "workitem.updated")
	client.publish(topo.Exchange, killed)
	client.close()
	testenv.WaitFor(t, 60*time.Second, "handlers in flight and events in the retry tier", func() bool {
		s := c.Stats()
		return s.InFlight > 0 && s.Retried > 0
	})
	ok.markNow()
	cl.Kill(leader)
	openGate()
	ok.waitAll(t, eventIDs(killed), 3*time.Minute)
	t.Logf("kill -9 of node %d: events flowed again %v after it", leader, ok.resumedAfter().Round(time.Millisecond))

	// 2. Restart it: it rejoins, and the consumer keeps going.
	if err := cl.Restart(ctx, leader); err != nil {
		t.Fatal(err)
	}
	client = dialNode(t, urls[pubNode])
	restarted := manyEvents(n/2, "restart", "workitem.updated")
	client.publish(topo.Exchange, restarted)
	client.close()
	ok.waitAll(t, eventIDs(restarted), 3*time.Minute)

	// 3. Stop the application of another node (a drained node in a rolling
	// upgrade) while events arrive through the third.
	other := (leader + 2) % len(urls)
	ok.markNow()
	if err := cl.StopApp(ctx, other); err != nil {
		t.Fatal(err)
	}
	// RabbitMQ 3.10 nacks, until the stopped node is back, every publish
	// on a channel that first published to a quorum queue while its
	// members were electing a new leader (see relay/nacked.go): the test's
	// own publisher waits for the election.
	testenv.WaitFor(t, 2*time.Minute, "a leader of "+topo.Queue+" on a running node", func() bool {
		l, err := cl.QueueLeader(ctx, "/", topo.Queue)
		return err == nil && l != other
	})
	client = dialNode(t, urls[leader])
	stopped := manyEvents(n/2, "stopapp", "workitem.updated")
	client.publish(topo.Exchange, stopped)
	ok.waitAll(t, eventIDs(stopped), 3*time.Minute)
	t.Logf("stop_app of node %d: events flowed again %v after it", other, ok.resumedAfter().Round(time.Millisecond))
	if err := cl.StartApp(ctx, other); err != nil {
		t.Fatal(err)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	// Nothing is left anywhere, and nothing was dead-lettered.
	for _, q := range topo.Queues() {
		if depth := testenv.QueueDepth(t, client.ch, q); depth != 0 {
			t.Errorf("%d messages left in %s", depth, q)
		}
	}
	failMu.Lock()
	retried := len(failed)
	failMu.Unlock()
	s := c.Stats()
	if s.DeadLettered != 0 {
		t.Errorf("%d events dead-lettered", s.DeadLettered)
	}
	if s.Reconnects == 0 {
		t.Errorf("no reconnect: the consumer should have lost the node it was connected to")
	}
	t.Logf("%d events, %d through the retry tier, %d handled twice (at-least-once across the kill), %d reconnects",
		2*n, retried, ok.duplicates(), s.Reconnects)
}

// waitLeader waits until a running node names the leader of queue.
func waitLeader(t *testing.T, cl *localrabbit.Cluster, queue string) int {
	t.Helper()
	leader := -1
	var err error
	testenv.WaitFor(t, 60*time.Second, fmt.Sprintf("a leader of %s", queue), func() bool {
		leader, err = cl.QueueLeader(context.Background(), "/", queue)
		return err == nil
	})
	return leader
}
