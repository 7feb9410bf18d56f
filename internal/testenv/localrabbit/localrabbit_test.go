package localrabbit_test

import (
	"context"
	"os"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/internal/amqpx"
	"github.com/warrenmq/warren/internal/testenv/localrabbit"
)

func TestMain(m *testing.M) {
	code := m.Run()
	localrabbit.StopShared()
	os.Exit(code)
}

// The alarm does what tests rely on: the broker blocks a connection that
// publishes, and unblocks it when the alarm is lifted.
func TestAlarmBlocksPublishingConnections(t *testing.T) {
	t.Parallel() // the only test of the binary on its shared private node (localrabbit.Shared)
	n := localrabbit.Shared(t)
	conn, err := amqpx.Dial(context.Background(), n.URL(), amqpx.DialOptions{Name: t.Name()})
	if err != nil {
		t.Fatal(err)
	}
	defer amqpx.CloseConnection(conn, 5*time.Second)
	blocked := conn.NotifyBlocked(make(chan amqp.Blocking, 4))
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}

	lift := n.Alarm(t)
	// RabbitMQ 3.10 blocks a connection when it publishes under an alarm;
	// the send may wait until the alarm lifts, since the broker stops
	// reading.
	sent := make(chan error, 1)
	go func() { sent <- ch.Publish("", "nowhere", false, false, amqp.Publishing{Body: []byte("x")}) }()
	want := func(active bool) {
		t.Helper()
		select {
		case b := <-blocked:
			if b.Active != active {
				t.Fatalf("got %+v, want Active %v", b, active)
			}
		case <-time.After(time.Minute):
			t.Fatalf("no connection.blocked Active=%v within a minute", active)
		}
	}
	want(true)
	lift()
	want(false)
	if err := <-sent; err != nil {
		t.Fatalf("publish after the alarm lifted: %v", err)
	}
}
