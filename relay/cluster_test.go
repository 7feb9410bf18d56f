//go:build slow

package relay_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/internal/amqpx"
	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/internal/testenv/localrabbit"
	"github.com/warrenmq/warren/relay"
)

// A relay given every node of a cluster, whose node dies under it, dials
// another node at once and delivers again within seconds. Its new channel
// is usually opened before the members of the quorum queue the node led
// have elected another leader, and RabbitMQ 3.10 then nacks every publish
// on that channel until the dead node is back: the relay must see that
// nothing but nacks comes back and open another session.
// Serial: its verdict is a time bound (delivery within 45 s of a node's kill) on a three-node cluster that loads both cores.
func TestClusterRelayDeliversAgainAfterItsNodeDies(t *testing.T) {
	ctx := context.Background()
	testenv.RequireServices(t, "a private three-node RabbitMQ cluster")
	cl, err := localrabbit.StartCluster(ctx, t.TempDir(), "rl", 3)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Stop)
	urls := cl.URLs()
	ob := testenv.NewOutboxTable(t)
	exchange, queue := "relay.cluster", "relay.cluster.q"
	name := testenv.Name(t, "relay")

	sessions := make(chan struct{}, 16)
	r, err := relay.New(relay.Config{
		Pool: ob.Pool, Table: ob.Table.Name(), Exchange: exchange, AMQPURL: strings.Join(urls, ","), Name: name,
		PollMin: 10 * time.Millisecond, PollMax: 200 * time.Millisecond,
		ReconnectMaxDelay: 500 * time.Millisecond, Logger: testLogger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	relay.SetConnectedHook(r, func() { sessions <- struct{}{} })
	testenv.RunInBackground(t, r.Run)
	waitSession := func(what string) {
		t.Helper()
		select {
		case <-sessions:
		case <-time.After(2 * time.Minute):
			t.Fatalf("no broker session %s within 2 minutes", what)
		}
	}
	waitSession("at start")

	// The queue is led by the relay's node: declared through it (a
	// quorum queue's leader is the declaring client's node).
	node := connectionNode(t, cl, name)
	conn, err := amqpx.Dial(ctx, urls[node], amqpx.DialOptions{Name: t.Name() + " setup"})
	if err != nil {
		t.Fatal(err)
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(queue, true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(queue, "", exchange, false, nil); err != nil {
		t.Fatal(err)
	}
	amqpx.CloseConnection(conn, 5*time.Second)
	if leader, err := cl.QueueLeader(ctx, "/", queue); err != nil || leader != node {
		t.Fatalf("queue led by node %d (%v), want the relay's node %d", leader, err, node)
	}
	got := consumeFrom(t, urls[(node+1)%len(urls)], queue)
	before := ob.PublishN("before", 10)
	testenv.WaitFor(t, time.Minute, "the events before the kill", func() bool { return got.hasAll(before) })

	cl.Kill(node)
	killed := time.Now()
	waitSession("after the kill")
	after := ob.PublishN("after", 50)
	testenv.WaitFor(t, 45*time.Second, "the events written after the kill", func() bool { return got.hasAll(after) })
	t.Logf("events written after the kill of node %d delivered %v after it", node, time.Since(killed).Round(time.Millisecond))
}

// connectionNode returns the index of the node holding the connection
// whose client properties carry name (its connection_name): the server
// end of its address.
func connectionNode(t *testing.T, cl *localrabbit.Cluster, name string) int {
	t.Helper()
	node := -1
	var last string
	t.Cleanup(func() {
		if t.Failed() && node < 0 {
			t.Logf("last list_connections: %s", last)
		}
	})
	testenv.WaitFor(t, 30*time.Second, "the relay's connection in list_connections", func() bool {
		out, err := cl.Nodes()[0].CtlOutput(context.Background(), "list_connections", "name", "client_properties", "--formatter", "json")
		last = out
		if err != nil {
			last = err.Error()
			return false
		}
		var rows []struct {
			Name  string          `json:"name"`
			Props json.RawMessage `json:"client_properties"` // holds connection_name
		}
		if json.Unmarshal([]byte(out), &rows) != nil {
			return false
		}
		for _, row := range rows {
			if !strings.Contains(string(row.Props), name) {
				continue
			}
			for i, n := range cl.Nodes() {
				if strings.HasSuffix(row.Name, fmt.Sprintf(" -> 127.0.0.1:%d", n.Port)) {
					node = i
					return true
				}
			}
		}
		return false
	})
	return node
}

// ids is a set of message ids a consumer received.
type ids struct {
	mu   sync.Mutex
	seen map[string]bool
}

func (s *ids) hasAll(want []string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range want {
		if !s.seen[id] {
			return false
		}
	}
	return true
}

// consumeFrom consumes queue through url (auto-ack) for the rest of the
// test, and reconnects if its connection drops.
func consumeFrom(t *testing.T, url, queue string) *ids {
	t.Helper()
	got := &ids{seen: map[string]bool{}}
	testenv.RunInBackground(t, func(ctx context.Context) error {
		for ctx.Err() == nil {
			conn, err := amqpx.Dial(ctx, url, amqpx.DialOptions{Name: t.Name() + " consumer", Timeout: 5 * time.Second})
			if err != nil {
				select { // a pause between dials, not a wait for anything
				case <-ctx.Done():
				case <-time.After(200 * time.Millisecond):
				}
				continue
			}
			ch, err := conn.Channel()
			if err == nil {
				var deliveries <-chan amqp.Delivery
				if deliveries, err = ch.Consume(queue, "", true, false, false, false, nil); err == nil {
				loop:
					for {
						select {
						case d, ok := <-deliveries:
							if !ok {
								break loop
							}
							got.mu.Lock()
							got.seen[d.MessageId] = true
							got.mu.Unlock()
						case <-ctx.Done():
							break loop
						}
					}
				}
			}
			amqpx.CloseConnection(conn, 5*time.Second)
		}
		return nil
	})
	return got
}
