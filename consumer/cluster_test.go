package consumer_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/internal/amqpx"
	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/internal/testenv/localrabbit"
)

// startCluster runs a private three-node cluster for t.
func startCluster(t *testing.T) *localrabbit.Cluster {
	t.Helper()
	testenv.RequireServices(t, "a private three-node RabbitMQ cluster")
	cl, err := localrabbit.StartCluster(context.Background(), t.TempDir(), "cq", 3)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Stop)
	t.Cleanup(func() { // before the stop: where the events a failed test waited for are
		if t.Failed() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			t.Log(cl.Queues(ctx, "/"))
		}
	})
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

// missing is how many of ids have not been handled.
func (s *successes) missing(ids []string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	missing := 0
	for _, id := range ids {
		if s.done[id] == 0 {
			missing++
		}
	}
	return missing
}

func (s *successes) waitAll(t *testing.T, ids []string, timeout time.Duration) {
	t.Helper()
	deadline := time.After(timeout)
	for {
		missing := s.missing(ids)
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
