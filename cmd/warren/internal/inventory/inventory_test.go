package inventory_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/cmd/warren/internal/inventory"
	"github.com/warrenmq/warren/internal/testenv"
)

func TestClassify(t *testing.T) {
	q := func(name string, n int) inventory.Queue { return inventory.Queue{Name: name, Messages: n} }
	got := inventory.Classify([]inventory.Queue{
		q("a", 1), q("a.dlq", 2), q("a.retry.5s", 3), q("a.retry.1m", 4),
		q("a.b", 5), q("a.b.dlq", 6), q("a.b.retry.5s", 7), // a.b is its own consumer, not a's
		q("p.p10", 8), q("p.p2", 9), q("p.dlq", 10), q("p.replicas", 0),
		q("other", 11), q("orphan.retry.5s", 12), q("a.pX", 13),
	})
	want := "a: queue a=1 dlq 2 retry [a.retry.5s=3 a.retry.1m=4] partitions []\n" +
		"a.b: queue a.b=5 dlq 6 retry [a.b.retry.5s=7] partitions []\n" +
		"p: queue =0 dlq 10 retry [] partitions [p.p2=9 p.p10=8]\n"
	var b strings.Builder
	for _, c := range got {
		fmt.Fprintf(&b, "%s: queue %s=%d dlq %d retry %s partitions %s\n", c.Name, c.Queue.Name, c.Queue.Messages, c.DLQ.Messages, names(c.Retry), names(c.Partitions))
	}
	if b.String() != want {
		t.Fatalf("Classify:\n%s\nwant:\n%s", b.String(), want)
	}
	if d := got[2].Depth(); d != 17 {
		t.Fatalf("partitioned consumer's depth %d, want 17", d)
	}
}

func names(qs []inventory.Queue) string {
	var parts []string
	for _, q := range qs {
		parts = append(parts, fmt.Sprintf("%s=%d", q.Name, q.Messages))
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// A consumer's topology, declared the way warren names it, is found
// through the real management API with its depths.
func TestConsumersFromTheBroker(t *testing.T) {
	testenv.RequireManagement(t)
	name := testenv.Name(t, "inv")
	queues := []string{name, name + ".dlq", name + ".retry.5s"}
	testenv.CleanupQueues(t, queues...)
	ch := testenv.Channel(t)
	// The queue's one message was created 90s ago (the relays stamp the
	// event's creation time); the others carry no timestamp.
	created := time.Now().Add(-90 * time.Second).Truncate(time.Second)
	for i, q := range queues {
		if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		for range i + 1 { // 1 in the queue, 2 in the DLQ, 3 in the tier
			msg := amqp.Publishing{Body: []byte("x")}
			if i == 0 {
				msg.Timestamp = created
			}
			if err := ch.PublishWithContext(context.Background(), "", q, false, false, msg); err != nil {
				t.Fatal(err)
			}
		}
	}
	inv, err := inventory.New(testenv.AMQPURL(t), "")
	if err != nil {
		t.Fatal(err)
	}
	// The management API refreshes its figures every 5 s by default.
	var c inventory.Consumer
	deadline := time.Now().Add(time.Minute)
	for {
		cs, err := inv.Consumers(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, found := range cs {
			if found.Name == name {
				c = found
			}
		}
		if c.Queue.Messages == 1 && c.DLQ.Messages == 2 && len(c.Retry) == 1 && c.Retry[0].Messages == 3 && !c.Queue.OldestAt.IsZero() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("consumer %s as found: %+v; want depths 1, 2 and 3", name, c)
		}
		time.Sleep(200 * time.Millisecond) // polling another process's refresh; nothing to wait on
	}
	if c.Queue.Name != name || c.DLQ.Name != name+".dlq" || c.Retry[0].Name != name+".retry.5s" {
		t.Fatalf("names: %+v", c)
	}
	if !c.Queue.OldestAt.Equal(created) || !c.DLQ.OldestAt.IsZero() {
		t.Errorf("the oldest message's time: queue %v (want %v), DLQ %v (want none: no timestamp)", c.Queue.OldestAt, created, c.DLQ.OldestAt)
	}
}

func TestManagementErrorsSayWhatToDo(t *testing.T) {
	testenv.RequireManagement(t)
	amqpURL := testenv.AMQPURL(t)
	bad := strings.Replace(amqpURL, "guest:guest", "guest:s3cret-wrong", 1)
	if bad == amqpURL {
		t.Skip("the test broker's URL does not use guest:guest")
	}
	inv, err := inventory.New(bad, "")
	if err != nil {
		t.Fatal(err)
	}
	_, err = inv.Consumers(context.Background())
	if err == nil || !strings.Contains(err.Error(), "refused the credentials") || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("wrong password: %v", err)
	}

	inv, err = inventory.New(amqpURL, "http://127.0.0.1:1/")
	if err != nil {
		t.Fatal(err)
	}
	if _, err = inv.Consumers(context.Background()); err == nil || !strings.Contains(err.Error(), "rabbitmq-plugins enable rabbitmq_management") {
		t.Fatalf("no management API: %v", err)
	}
	if _, err := inventory.New(amqpURL, "ftp://x"); err == nil {
		t.Fatal("a management URL that is not http was accepted")
	}
}

func TestVhostFromTheURL(t *testing.T) {
	for url, want := range map[string]string{
		"amqp://guest:guest@localhost:5672/":        "/",
		"amqp://guest:guest@localhost:5672":         "/",
		"amqp://guest:guest@localhost:5672/%2F":     "/",
		"amqp://guest:guest@localhost:5672/orders":  "orders",
		"amqp://u:p@h1:5672/v1,amqp://u:p@h2:5672/": "v1",
	} {
		inv, err := inventory.New(url, "")
		if err != nil {
			t.Fatal(err)
		}
		if inv.Vhost() != want {
			t.Errorf("%s: vhost %q, want %q", url, inv.Vhost(), want)
		}
		if strings.Contains(inv.Endpoint(), ":p@") || strings.Contains(inv.Endpoint(), "guest:guest") {
			t.Errorf("endpoint shows the password: %s", inv.Endpoint())
		}
	}
}
