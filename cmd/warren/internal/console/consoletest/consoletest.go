// Package consoletest starts a console over a fresh dead-letter topology
// on the test broker, for the console's tests and its browser tests (a
// module of their own, so that the library's go.mod does not carry the
// browser driver).
package consoletest

import (
	"fmt"
	"net/http/httptest"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/cmd/warren/internal/console"
	"github.com/warrenmq/warren/dlq"
	"github.com/warrenmq/warren/internal/testenv"
)

// Fixture is a console serving over HTTP, and the dead-letter topology it
// shows.
type Fixture struct {
	T       testing.TB
	Console *console.Server
	Srv     *httptest.Server
	Conn    *amqp.Connection
	Ch      *amqp.Channel
	Top     testenv.DeadLetterTopology
}

// New starts a console with cfg (its AMQPURL the test broker's) over a
// DLQ of queueType, as a consumer with that QueueType declares it. All of
// it ends with t.
func New(t testing.TB, cfg console.Config, queueType string) *Fixture {
	t.Helper()
	conn := testenv.AMQPConn(t)
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	top := testenv.DeclareDeadLetterTopologyOfType(t, ch, queueType)
	cfg.AMQPURL = testenv.AMQPURL(t)
	s, err := console.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	return &Fixture{T: t, Console: s, Srv: srv, Conn: conn, Ch: ch, Top: top}
}

// DeadLetters puts n dead letters in the DLQ that differ only in ids and
// numbers in their error text, so they share one failure signature.
func (f *Fixture) DeadLetters(prefix string, n int, errFormat string) {
	f.T.Helper()
	msgs := make([]amqp.Publishing, n)
	for i := range msgs {
		id := fmt.Sprintf("%s-%d", prefix, i)
		msgs[i] = f.Top.Message(testenv.Dead{ID: id, Type: "workitem.updated", Class: dlq.ClassExhausted, Attempts: 5, Err: fmt.Sprintf(errFormat, i)})
	}
	testenv.PublishInOrder(f.T, f.Conn, f.Top.DLQ, msgs)
}

// Depth is queue's message count.
func (f *Fixture) Depth(queue string) int {
	f.T.Helper()
	return testenv.QueueDepth(f.T, f.Ch, queue)
}
