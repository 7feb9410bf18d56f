package dlqtool_test

import (
	"context"
	"errors"
	"net/url"
	"slices"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/dlqtool"
	"github.com/warrenmq/warren/internal/amqpx"
	"github.com/warrenmq/warren/internal/testenv"
)

// throughProxy opens the fixture's DLQ again on a connection through a
// proxy that can stop passing what the client sends while the broker's
// heartbeats keep arriving. The heartbeat is the default (10s): the
// client's own read deadline, three heartbeats, then outlasts the
// SetupTimeout these tests wait for. At one second it was three seconds,
// which a starved machine's late heartbeat passed: amqp091-go closed the
// connection itself ("i/o timeout") before warren gave up on the broker
// (TestReplayReturnsWhenTheBrokerStopsReadingBeforeItStarts, busy.sh).
func (f *fixture) throughProxy(t *testing.T) (*dlqtool.Queue, *testenv.Proxy) {
	t.Helper()
	brokerURL := testenv.AMQPURL(t)
	u, _ := url.Parse(brokerURL)
	proxy := testenv.StartAMQPProxy(t, u.Host)
	conn, err := amqpx.Dial(context.Background(), proxy.URL(t, brokerURL), amqpx.DialOptions{Name: "dlq " + t.Name()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { amqpx.CloseConnection(conn, time.Second) })
	q, err := dlqtool.Open(context.Background(), conn, f.top.Consumer)
	if err != nil {
		t.Fatal(err)
	}
	return q, proxy
}

// returnsWithin runs op and fails t unless it returns within limit; if it
// hangs, the proxy drops its connections so the test can end.
func returnsWithin[T any](t *testing.T, proxy *testenv.Proxy, limit time.Duration, what string, op func() (T, error)) (T, error) {
	t.Helper()
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := op()
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-time.After(limit):
		proxy.SetUp(false)
		<-done
		t.Fatalf("%s hung for %v after the broker stopped reading", what, limit)
		panic("unreachable")
	}
}

// The broker stops reading the replay's connection halfway (an alarm
// blocks publishing connections): Replay returns within a bound, and every
// message is in the DLQ or its origin queue.
func TestReplayReturnsWhenTheBrokerStopsReading(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	msgs := mixed(f.top, 50, time.Now())
	testenv.PublishConfirmed(t, f.conn, f.top.DLQ, msgs)
	q, proxy := f.throughProxy(t)

	res, err := returnsWithin(t, proxy, 40*time.Second, "Replay", func() (dlqtool.Result, error) {
		return q.Replay(context.Background(), dlqtool.ReplayOptions{DrainTimeout: time.Second, Progress: func(p dlqtool.Progress) {
			if p.Done == 10 {
				proxy.StopReading(true)
			}
		}})
	})
	if err == nil {
		t.Fatal("a replay whose publishes the broker never read succeeded")
	}
	t.Logf("replay: %+v, %v", res.Progress, err)
	if res.Done < 10 || res.Done == len(msgs) {
		t.Fatalf("replay reports %d done; want at least the 10 before the stall and not all", res.Done)
	}
	// The unacked rest returns to the DLQ once the broker sees the
	// connection go. A message may be in both queues (its removal was
	// held), never in neither.
	testenv.WaitFor(t, 20*time.Second, "every message back in a queue", func() bool {
		return f.depth(t, f.top.DLQ)+f.depth(t, f.top.Consumer) >= len(msgs)
	})
	origin, dead := testenv.Drain(t, f.conn, f.top.Consumer), testenv.Drain(t, f.conn, f.top.DLQ)
	if len(origin) < res.Done {
		t.Errorf("%d replays reported done, the origin queue holds %d", res.Done, len(origin))
	}
	all := append(ids(origin), ids(dead)...)
	slices.Sort(all)
	all = slices.Compact(all)
	want := ids(msgs)
	slices.Sort(want)
	if !slices.Equal(all, want) {
		t.Fatalf("origin %d + DLQ %d messages do not cover the %d published", len(origin), len(dead), len(msgs))
	}
}

// The broker stops reading the connection before a replay has set up its
// publisher: Replay returns within SetupTimeout and a margin, with an
// error saying the broker did not answer, and every message stays in the
// DLQ.
func TestReplayReturnsWhenTheBrokerStopsReadingBeforeItStarts(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	msgs := mixed(f.top, 5, time.Now())
	testenv.PublishConfirmed(t, f.conn, f.top.DLQ, msgs)
	q, proxy := f.throughProxy(t)
	proxy.StopReading(true)

	_, err := returnsWithin(t, proxy, amqpx.SetupTimeout+20*time.Second, "Replay", func() (dlqtool.Result, error) {
		return q.Replay(context.Background(), dlqtool.ReplayOptions{})
	})
	if !errors.Is(err, amqpx.ErrNoAnswer) {
		t.Fatalf("Replay = %v, want an error wrapping ErrNoAnswer", err)
	}
	testenv.WaitFor(t, 20*time.Second, "every message back in the DLQ", func() bool {
		return f.depth(t, f.top.DLQ) == len(msgs)
	})
}

// The broker stops reading an import's connection halfway: Import returns
// within a bound, and the messages it reports done are in the queue.
func TestImportReturnsWhenTheBrokerStopsReading(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	var msgs []dlqtool.Message
	for i, p := range mixed(f.top, 50, time.Now()) {
		msgs = append(msgs, messageOf(i, p))
	}
	q, proxy := f.throughProxy(t)

	res, err := returnsWithin(t, proxy, 40*time.Second, "Import", func() (dlqtool.Result, error) {
		return q.Import(context.Background(), msgs, dlqtool.ImportOptions{DrainTimeout: time.Second, Progress: func(p dlqtool.Progress) {
			if p.Done == 10 {
				proxy.StopReading(true)
			}
		}})
	})
	if err == nil {
		t.Fatal("an import whose publishes the broker never read succeeded")
	}
	t.Logf("import: %+v, %v", res.Progress, err)
	if res.Done != 10 {
		t.Fatalf("import reports %d done, want the 10 confirmed before the stall", res.Done)
	}
	got := testenv.Drain(t, f.conn, f.top.DLQ)
	if !slices.Equal(testenv.MessageIDs(got), ids(toPublishings(msgs[:res.Done]))) {
		t.Fatalf("the DLQ holds %v, want the %d reported done", testenv.MessageIDs(got), res.Done)
	}
}

func toPublishings(ms []dlqtool.Message) []amqp.Publishing {
	out := make([]amqp.Publishing, len(ms))
	for i, m := range ms {
		out[i] = m.Publishing
	}
	return out
}

// The messages a peek counted are taken by another client before its read
// starts, so the peek cancels its read to learn whether any is still on its
// way; the broker stops reading the connection just as that cancel is
// sent. Peek returns within SetupTimeout and a margin, with an error saying
// the broker did not answer, as Open promises for every round trip (it hung
// when the cancel was bounded only by the caller's context).
func TestPeekReturnsWhenTheBrokerStopsReadingAsItEnds(t *testing.T) {
	// Serial: sets the package's idleWait, which every scan reads.
	defer dlqtool.SetIdleWait(10 * time.Millisecond)()
	f := newFixture(t)
	testenv.PublishConfirmed(t, f.conn, f.top.DLQ, mixed(f.top, 3, time.Now()))
	q, proxy := f.throughProxy(t)
	purged := make(chan error, 1)
	cancelSent := make(chan struct{})
	proxy.OnClientMethod(func(class, method uint16) {
		switch {
		case class == testenv.BasicClass && method == testenv.BasicConsume:
			// On the test's own connection, before the consume reaches the broker.
			_, err := f.ch.QueuePurge(f.top.DLQ, false)
			purged <- err
		case class == testenv.BasicClass && method == testenv.BasicCancel:
			proxy.StopReading(true)
			close(cancelSent)
		}
	})

	_, err := returnsWithin(t, proxy, amqpx.SetupTimeout+20*time.Second, "Peek", func() ([]dlqtool.Message, error) {
		return q.Peek(context.Background(), dlqtool.PeekOptions{})
	})
	if perr := <-purged; perr != nil {
		t.Fatalf("purge before the peek's read: %v", perr)
	}
	select {
	case <-cancelSent:
	default:
		t.Fatalf("Peek = %v without cancelling its read; the test did not reach the path it is for", err)
	}
	if !errors.Is(err, amqpx.ErrNoAnswer) {
		t.Fatalf("Peek = %v, want an error wrapping ErrNoAnswer", err)
	}
}

// The broker stops reading a purge's connection at its first ack, so the
// acks it sends are never read: the purge counts them done, but cannot
// know they took effect, and says so (ErrUnconfirmed) rather than report
// a success while the messages are still queued. They are: the broker
// puts them back when the connection goes.
func TestPurgeSaysWhenItsDeletesAreUnconfirmed(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	msgs := mixed(f.top, 3, time.Now())
	testenv.PublishConfirmed(t, f.conn, f.top.DLQ, msgs)
	q, proxy := f.throughProxy(t)
	proxy.OnClientMethod(func(class, method uint16) {
		if class == testenv.BasicClass && method == testenv.BasicAck {
			proxy.StopReading(true)
		}
	})
	res, err := returnsWithin(t, proxy, amqpx.CloseTimeout+20*time.Second, "Purge", func() (dlqtool.Result, error) {
		return q.Purge(context.Background(), dlqtool.PurgeOptions{})
	})
	if !errors.Is(err, dlqtool.ErrUnconfirmed) {
		t.Fatalf("Purge = %+v, %v; want an error wrapping ErrUnconfirmed", res.Progress, err)
	}
	if res.Done == 0 {
		t.Errorf("purge counts no acks sent; the test did not reach the path it is for")
	}
	testenv.WaitFor(t, 20*time.Second, "the unconfirmed deletes to be undone by the connection's end", func() bool {
		return f.depth(t, f.top.DLQ) == len(msgs)
	})
}

// With the broker reading, the close's answer confirms the acks: no error.
func TestPurgeThroughAProxyIsConfirmed(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	testenv.PublishConfirmed(t, f.conn, f.top.DLQ, mixed(f.top, 3, time.Now()))
	q, _ := f.throughProxy(t)
	if res, err := q.Purge(context.Background(), dlqtool.PurgeOptions{}); err != nil || res.Done != 3 {
		t.Fatalf("Purge = %+v, %v", res.Progress, err)
	}
	if n := f.depth(t, f.top.DLQ); n != 0 {
		t.Errorf("the DLQ holds %d after a confirmed purge", n)
	}
}
