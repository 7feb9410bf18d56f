package localrabbit_test

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/internal/amqpx"
	"github.com/warrenmq/warren/internal/testenv/localrabbit"
)

func TestMain(m *testing.M) {
	os.Exit(localrabbit.RunTests(m))
}

// TestSharedNode runs the tests of the binary's shared private node one
// after another.
func TestSharedNode(t *testing.T) {
	localrabbit.RunLane(t, []localrabbit.LaneTest{
		{Name: "AlarmBlocksPublishingConnections", Run: testAlarmBlocksPublishingConnections},
		{Name: "EvalAnswersAndFails", Run: testEvalAnswersAndFails},
		{Name: "LockedOutUserIsRefusedUntilLetIn", Run: testLockedOutUserIsRefusedUntilLetIn},
	})
}

// The alarm does what tests rely on: the broker blocks a connection that
// publishes, and unblocks it when the alarm is lifted.
func testAlarmBlocksPublishingConnections(t *testing.T) {
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

// Eval returns the value of the last expression, and an expression that
// raises is an error carrying Erlang's reason, after which the session
// still answers.
func testEvalAnswersAndFails(t *testing.T) {
	n := localrabbit.Shared(t)
	ctx := context.Background()
	if got, err := n.Eval(ctx, "X = 20,\n X + 22."); err != nil || got != "42" {
		t.Fatalf("Eval = %q, %v; want 42", got, err)
	}
	if _, err := n.Eval(ctx, "erlang:error(warren_test_boom)."); err == nil || !strings.Contains(err.Error(), "warren_test_boom") {
		t.Fatalf("Eval of a raise = %v; want an error naming warren_test_boom", err)
	}
	if _, err := n.Eval(ctx, "this is not erlang"); err == nil {
		t.Fatal("Eval of text that does not parse succeeded")
	}
	if got, err := n.Eval(ctx, "node()."); err != nil || got != n.Name {
		t.Fatalf("Eval after errors = %q, %v; want the node's name %s", got, err, n.Name)
	}
	// What the expressions print is not taken for their value, nor for
	// the next call's.
	if got, err := n.Eval(ctx, `io:format("{ok,printed}~n"), real.`); err != nil || got != "real" {
		t.Fatalf("Eval of a printing expression = %q, %v; want real", got, err)
	}
	if got, err := n.Eval(ctx, "next."); err != nil || got != "next" {
		t.Fatalf("Eval after a printing one = %q, %v; want next", got, err)
	}
	// The text reaches Erlang as written: spaces, a tab, a comment.
	if got, err := n.Eval(ctx, "X = \"a  b\tc\", % six characters\nlength(X)."); err != nil || got != "6" {
		t.Fatalf("Eval of a string with white space = %q, %v; want 6", got, err)
	}
	// A call whose context has ended fails at once.
	done, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := n.Eval(done, "ok."); !errors.Is(err, context.Canceled) {
		t.Fatalf("Eval with a cancelled context = %v; want context.Canceled", err)
	}
}

// A locked-out user is refused at login and loses its open connection;
// let in again, it logs in.
func testLockedOutUserIsRefusedUntilLetIn(t *testing.T) {
	n := localrabbit.Shared(t)
	u := n.AddUser(t, "warren-lockout-"+strconv.Itoa(os.Getpid()), ".*", ".*", ".*")
	ctx := context.Background()
	dial := func() (*amqp.Connection, error) {
		return amqpx.Dial(ctx, u.URL(), amqpx.DialOptions{Name: t.Name(), Timeout: 10 * time.Second})
	}
	conn, err := dial()
	if err != nil {
		t.Fatal(err)
	}
	closed := conn.NotifyClose(make(chan *amqp.Error, 1))
	u.LockOut(t)
	select {
	case <-closed:
	case <-time.After(time.Minute):
		t.Fatal("the locked-out user's connection is still open a minute later")
	}
	var ae *amqp.Error
	if c, err := dial(); err == nil {
		c.Close()
		t.Fatal("a locked-out user logged in")
	} else if !errors.As(err, &ae) || ae.Code != amqp.AccessRefused {
		t.Fatalf("login of a locked-out user = %v; want 403 ACCESS_REFUSED", err)
	}
	u.LetIn(t)
	c, err := dial()
	if err != nil {
		t.Fatalf("login after LetIn: %v", err)
	}
	c.Close()
}
