package amqpx_test

import (
	"context"
	"errors"
	"net/url"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/internal/amqpx"
	"github.com/warrenmq/warren/internal/testenv"
)

// stoppedReading dials the broker through a proxy that then stops passing
// what the client sends, while the broker's heartbeats keep arriving: the
// client never times the connection out by itself. The heartbeat is the
// default (10s), so the client's own read deadline (three heartbeats)
// outlasts every bound these tests assert; at one second a starved
// machine's late heartbeat could end the connection first (the same race
// showed in dlqtool's stop tests under busy.sh).
func stoppedReading(t *testing.T) (*amqp.Connection, *testenv.Proxy) {
	t.Helper()
	brokerURL := testenv.AMQPURL(t)
	u, _ := url.Parse(brokerURL)
	proxy := testenv.StartAMQPProxy(t, u.Host)
	conn, err := amqpx.Dial(context.Background(), proxy.URL(t, brokerURL), amqpx.DialOptions{Name: "stopped-reading " + t.Name()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { amqpx.CloseConnection(conn, time.Second) })
	return conn, proxy
}

// within fails t unless f returns within limit, and returns f's error.
func within(t *testing.T, limit time.Duration, what string, f func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-time.After(limit):
		t.Fatalf("%s hung for %v while the broker was not reading", what, limit)
		return nil
	}
}

// A channel close the broker never answers ends after CloseTimeout, with
// the connection closed under it, although heartbeats keep flowing.
func TestCloseChannelReturnsWhenTheBrokerStopsReading(t *testing.T) {
	t.Parallel()
	conn, proxy := stoppedReading(t)
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	proxy.StopReading(true)
	err = within(t, amqpx.CloseTimeout+20*time.Second, "CloseChannel", func() error { return amqpx.CloseChannel(conn, ch) })
	// ErrNoAnswer, not a closed connection: the broker's heartbeats kept
	// the connection alive for all of CloseTimeout.
	if !errors.Is(err, amqpx.ErrNoAnswer) {
		t.Fatalf("CloseChannel = %v, want ErrNoAnswer", err)
	}
	if !conn.IsClosed() {
		t.Error("the connection is still open after the broker did not answer")
	}
}

// Bound gives back an answer that arrives in time, untouched.
func TestBoundPassesAnAnswer(t *testing.T) {
	t.Parallel()
	conn := testenv.AMQPConn(t)
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	q := testenv.Name(t, "q")
	err = amqpx.Bound(ctx, conn, func() error {
		_, err := ch.QueueDeclarePassive(q, false, false, false, false, nil)
		return err
	})
	var ae *amqp.Error
	if !errors.As(err, &ae) || ae.Code != amqp.NotFound || errors.Is(err, amqpx.ErrNoAnswer) {
		t.Fatalf("Bound = %v, want the broker's NOT_FOUND", err)
	}
	if conn.IsClosed() {
		t.Error("Bound closed a connection that answered")
	}
}

// A publisher whose publish waits for a confirm the broker will never send
// closes within CloseTimeout, and the publish fails.
func TestPublisherCloseReturnsWhenTheBrokerStopsReading(t *testing.T) {
	t.Parallel()
	conn, proxy := stoppedReading(t)
	p, err := amqpx.NewPublisher(context.Background(), conn, 4)
	if err != nil {
		t.Fatal(err)
	}
	proxy.StopReading(true)
	published := make(chan error, 1)
	go func() {
		published <- p.Publish(context.Background(), "", "anywhere", amqp.Publishing{Body: []byte("x")})
	}()
	within(t, amqpx.CloseTimeout+20*time.Second, "Publisher.Close", p.Close)
	if err := within(t, 10*time.Second, "the publish", func() error { return <-published }); err == nil {
		t.Fatal("a publish the broker never read succeeded")
	}
}

// An op that returns while ctx ends at the same moment (here: ctx had
// already ended when Bound was called) gets one of two consistent
// outcomes, never a mix: its own error untouched on an open connection,
// or ErrNoAnswer on a closed one, with op's error still reachable through
// errors.Is/As (a refused declaration must stay recognisable, say). The
// two happen at random, so the test repeats until both were seen.
func TestBoundKeepsOpsErrorWhenCtxEndsTogether(t *testing.T) {
	t.Parallel()
	opErr := errors.New("the op's own error")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var kept, closed int
	for i := 0; i < 200 && (kept == 0 || closed == 0 || i < 50); i++ {
		conn := testenv.AMQPConn(t)
		err := amqpx.Bound(ctx, conn, func() error { return opErr })
		if !errors.Is(err, opErr) {
			t.Fatalf("round %d: Bound = %v, lost the op's error", i, err)
		}
		switch noAnswer := errors.Is(err, amqpx.ErrNoAnswer); {
		case noAnswer != conn.IsClosed():
			t.Fatalf("round %d: Bound = %v but the connection closed = %v", i, err, conn.IsClosed())
		case noAnswer:
			closed++
		default:
			kept++
		}
	}
	t.Logf("op's answer kept %d times, connection closed %d times", kept, closed)
}

// When Bound closes the connection under an op, the op's error (from the
// close) is wrapped, not flattened into text.
func TestBoundWrapsTheErrorOfAnOpItCutOff(t *testing.T) {
	t.Parallel()
	conn := testenv.AMQPConn(t)
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var te *testTopologyError
	err = amqpx.Bound(ctx, conn, func() error {
		closed := ch.NotifyClose(make(chan *amqp.Error, 1))
		cancel() // ctx ends before op returns: Bound closes conn
		<-closed
		_, err := ch.QueueDeclarePassive(testenv.Name(t, "q"), false, false, false, false, nil)
		return &testTopologyError{err}
	})
	if !errors.Is(err, amqpx.ErrNoAnswer) || !errors.As(err, &te) || !errors.Is(err, amqp.ErrClosed) {
		t.Fatalf("Bound = %v, want ErrNoAnswer wrapping the op's error", err)
	}
	if !conn.IsClosed() {
		t.Error("Bound returned ErrNoAnswer but left the connection open")
	}
}

type testTopologyError struct{ err error }

func (e *testTopologyError) Error() string { return "declare: " + e.err.Error() }
func (e *testTopologyError) Unwrap() error { return e.err }
