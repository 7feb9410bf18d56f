package amqpx_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/internal/amqpx"
	"github.com/warrenmq/warren/internal/testenv"
)

func newPublisher(t *testing.T, maxInFlight int) (*amqpx.Publisher, *amqp.Channel) {
	t.Helper()
	conn := testenv.AMQPConn(t)
	p, err := amqpx.NewPublisher(context.Background(), conn, maxInFlight)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return p, ch
}

func TestPublishConfirmedReachesQueue(t *testing.T) {
	t.Parallel()
	p, ch := newPublisher(t, 0)
	q := testenv.Name(t, "q")
	testenv.CleanupQueues(t, q)
	if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 500)
	for i := range 500 {
		wg.Go(func() {
			errs <- p.Publish(ctx, "", q, amqp.Publishing{MessageId: fmt.Sprint(i), Body: []byte("x"), DeliveryMode: amqp.Persistent})
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := testenv.QueueDepth(t, ch, q); n != 500 {
		t.Fatalf("queue holds %d messages, want 500", n)
	}
}

// With mandatory set, a message no queue takes is a failure, even though the
// broker acks it.
func TestPublishUnroutableIsAnError(t *testing.T) {
	t.Parallel()
	p, ch := newPublisher(t, 0)
	ex := testenv.Name(t, "ex")
	testenv.CleanupExchanges(t, ex)
	if err := ch.ExchangeDeclare(ex, "fanout", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	q := testenv.Name(t, "q")
	testenv.CleanupQueues(t, q)
	if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}

	// Interleave routable and unroutable publishes that share a message id:
	// every unroutable one must fail, and no routable one may be lost.
	ctx := context.Background()
	var wg sync.WaitGroup
	var mu sync.Mutex
	okCount := 0
	for i := range 200 {
		wg.Go(func() {
			id := fmt.Sprint(i % 7)
			if i%2 == 0 {
				err := p.Publish(ctx, ex, "", amqp.Publishing{MessageId: id, Body: []byte("x")})
				if !errors.Is(err, amqpx.ErrUnroutable) {
					t.Errorf("unroutable publish %d: got %v, want ErrUnroutable", i, err)
				}
				var re *amqpx.ReturnedError
				if errors.As(err, &re) && re.ReplyCode != 312 {
					t.Errorf("reply code %d, want 312 NO_ROUTE", re.ReplyCode)
				}
				return
			}
			if err := p.Publish(ctx, "", q, amqp.Publishing{MessageId: id, Body: []byte("x")}); err == nil {
				mu.Lock()
				okCount++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if n := testenv.QueueDepth(t, ch, q); n != okCount {
		t.Fatalf("%d publishes reported success but the queue holds %d", okCount, n)
	}
	if okCount != 100 {
		t.Errorf("%d of 100 routable publishes succeeded", okCount)
	}
}

// A queue that rejects publishes when full makes the broker nack.
func TestPublishNackIsAnError(t *testing.T) {
	t.Parallel()
	p, ch := newPublisher(t, 0)
	q := testenv.Name(t, "q")
	testenv.CleanupQueues(t, q)
	args := amqp.Table{"x-max-length": int32(0), "x-overflow": "reject-publish"}
	if _, err := ch.QueueDeclare(q, true, false, false, false, args); err != nil {
		t.Fatal(err)
	}
	err := p.Publish(context.Background(), "", q, amqp.Publishing{Body: []byte("x")})
	if !errors.Is(err, amqpx.ErrNacked) {
		t.Fatalf("got %v, want ErrNacked", err)
	}
}

func TestPublishOnClosedChannelFails(t *testing.T) {
	t.Parallel()
	conn := testenv.AMQPConn(t)
	p, err := amqpx.NewPublisher(context.Background(), conn, 4)
	if err != nil {
		t.Fatal(err)
	}
	conn.Close()
	err = p.Publish(context.Background(), "", "anything", amqp.Publishing{Body: []byte("x")})
	if !errors.Is(err, amqpx.ErrClosed) {
		t.Fatalf("got %v, want ErrClosed", err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("Close after connection loss: %v", err)
	}
}

func TestPublishHonoursContext(t *testing.T) {
	t.Parallel()
	p, _ := newPublisher(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	<-ctx.Done()
	if err := p.Publish(ctx, "", "anything", amqp.Publishing{Body: []byte("x")}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want DeadlineExceeded", err)
	}
}

// A broker that stops reading the socket (as RabbitMQ does to a connection
// it blocks during an alarm) leaves a send stuck inside amqp091-go. Publish
// must still return by its deadline, and closing the connection with a
// deadline must unstick everything, so shutdowns cannot hang.
func TestPublishReturnsWhenTheSocketIsStuck(t *testing.T) {
	t.Parallel()
	brokerURL := testenv.AMQPURL(t)
	u, _ := url.Parse(brokerURL)
	proxy := testenv.StartProxy(t, u.Host)
	conn, err := amqpx.Dial(context.Background(), proxy.URL(t, brokerURL), amqpx.DialOptions{Name: "stuck-socket test"})
	if err != nil {
		t.Fatal(err)
	}
	p, err := amqpx.NewPublisher(context.Background(), conn, 64)
	if err != nil {
		t.Fatal(err)
	}
	proxy.Stall(true)
	// Large messages fill the socket buffers quickly, so some sends block.
	body := make([]byte, 1<<20)
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			begin := time.Now()
			err := p.Publish(ctx, "", "nowhere", amqp.Publishing{Body: body})
			if err == nil {
				t.Error("a publish through a stalled socket succeeded")
			}
			// Far past the deadline, yet well short of hanging: room
			// for a busy machine to schedule 32 senders.
			if took := time.Since(begin); took > 20*time.Second {
				t.Errorf("Publish took %v with a 300ms deadline", took)
			}
		})
	}
	// And a batch whose sends get stuck part way: every message gets one
	// verdict, none a success, on time.
	wg.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		batch := make([]amqpx.Outgoing, 16)
		for i := range batch {
			batch[i] = amqpx.Outgoing{RoutingKey: "nowhere", Msg: amqp.Publishing{MessageId: fmt.Sprint(i), Body: body}}
		}
		begin, calls := time.Now(), 0
		p.PublishBatch(ctx, "", batch, func(i int, err error) {
			if calls++; i != calls-1 || err == nil {
				t.Errorf("batch verdict %d for message %d: %v", calls, i, err)
			}
		})
		if took := time.Since(begin); calls != len(batch) || took > 20*time.Second {
			t.Errorf("PublishBatch gave %d verdicts for %d messages in %v with a 300ms deadline", calls, len(batch), took)
		}
	})
	wg.Wait()
	closed := make(chan error, 1)
	go func() {
		amqpx.CloseConnection(conn, 500*time.Millisecond)
		closed <- p.Close()
	}()
	select {
	case <-closed:
	case <-time.After(60 * time.Second):
		t.Fatal("closing the connection and the publisher hung behind the stuck sends")
	}
}

// A batch gets one verdict per message, in order, each its own: a nacked
// and a returned message in the middle fail alone, and exactly the
// messages reported confirmed are in the queue.
func TestPublishBatchVerdictEachMessage(t *testing.T) {
	t.Parallel()
	p, ch := newPublisher(t, 0)
	ok, refusing, missing := testenv.Name(t, "q"), testenv.Name(t, "refusing"), testenv.Name(t, "missing")
	testenv.CleanupQueues(t, ok, refusing)
	if _, err := ch.QueueDeclare(ok, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(refusing, true, false, false, false, amqp.Table{"x-max-length": int32(0), "x-overflow": "reject-publish"}); err != nil {
		t.Fatal(err)
	}
	var batch []amqpx.Outgoing
	want := map[int]error{}
	for i := range 30 {
		key := ok
		switch i % 5 {
		case 1:
			key, want[i] = refusing, amqpx.ErrNacked
		case 3:
			key, want[i] = missing, amqpx.ErrUnroutable
		}
		batch = append(batch, amqpx.Outgoing{RoutingKey: key, Msg: amqp.Publishing{MessageId: fmt.Sprint(i), Body: []byte("x")}})
	}
	next, confirmed := 0, 0
	p.PublishBatch(context.Background(), "", batch, func(i int, err error) {
		if i != next {
			t.Errorf("verdict for message %d, want %d next", i, next)
		}
		next = i + 1
		switch {
		case want[i] == nil && err == nil:
			confirmed++
		case want[i] == nil || !errors.Is(err, want[i]):
			t.Errorf("message %d: got %v, want %v", i, err, want[i])
		}
	})
	if next != len(batch) {
		t.Fatalf("%d verdicts for %d messages", next, len(batch))
	}
	if n := testenv.QueueDepth(t, ch, ok); n != confirmed || n != 18 {
		t.Fatalf("queue holds %d messages; %d were confirmed, want 18", n, confirmed)
	}
}

// When the batch's ctx ends, messages still waiting for an in-flight slot
// never reached the broker and say so (ErrNotSent); a message sent and
// not yet confirmed says only that ctx ended. Nothing is reported twice.
func TestPublishBatchTimeoutTellsUnsentFromUnconfirmed(t *testing.T) {
	t.Parallel()
	brokerURL := testenv.AMQPURL(t)
	u, err := url.Parse(brokerURL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := testenv.StartProxy(t, u.Host)
	conn, err := amqp.Dial(proxy.URL(t, brokerURL))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { amqpx.CloseConnection(conn, time.Second) })
	p, err := amqpx.NewPublisher(context.Background(), conn, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	q := testenv.Name(t, "q")
	testenv.CleanupQueues(t, q)
	if _, err := testenv.Channel(t).QueueDeclare(q, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	proxy.Stall(true) // no confirm comes back: the one slot stays taken
	batch := make([]amqpx.Outgoing, 4)
	for i := range batch {
		batch[i] = amqpx.Outgoing{RoutingKey: q, Msg: amqp.Publishing{MessageId: fmt.Sprint(i), Body: []byte("x")}}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	verdicts := make([]error, len(batch))
	calls := 0
	p.PublishBatch(ctx, "", batch, func(i int, err error) { verdicts[i] = err; calls++ })
	if calls != len(batch) {
		t.Fatalf("%d verdicts for %d messages", calls, len(batch))
	}
	if err := verdicts[0]; !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, amqpx.ErrNotSent) {
		t.Errorf("message 0, sent and unconfirmed: got %v, want DeadlineExceeded without ErrNotSent", err)
	}
	for i, err := range verdicts[1:] {
		if !errors.Is(err, amqpx.ErrNotSent) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("message %d, never given a slot: got %v, want ErrNotSent and DeadlineExceeded", i+1, err)
		}
	}
}

// Batches given to Send reach the queue in the order of the calls, though
// none was waited for before the next was sent.
func TestSendKeepsBatchesInOrder(t *testing.T) {
	t.Parallel()
	p, ch := newPublisher(t, 64)
	q := testenv.Name(t, "q")
	testenv.CleanupQueues(t, q)
	if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	const batches, size = 20, 50
	// Bounded, so that batches that take each other's in-flight slots
	// fail the test rather than hang it.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var sent []*amqpx.Batch
	for b := range batches {
		msgs := make([]amqpx.Outgoing, size)
		for i := range msgs {
			msgs[i] = amqpx.Outgoing{RoutingKey: q, Msg: amqp.Publishing{MessageId: fmt.Sprint(b*size + i), Body: []byte("x")}}
		}
		sent = append(sent, p.Send(ctx, "", msgs))
		if b == 0 {
			// An empty batch among them, whose ctx ends as soon as it is
			// waited for, as a relay's batch of stream positions only does.
			empty, cancelEmpty := context.WithCancel(ctx)
			p.Send(empty, "", nil).Wait(func(i int, err error) { t.Errorf("a verdict for message %d of an empty batch: %v", i, err) })
			cancelEmpty()
		}
	}
	for b, batch := range sent {
		batch.Wait(func(i int, err error) {
			if err != nil {
				t.Errorf("batch %d message %d: %v", b, i, err)
			}
		})
	}
	deliveries, err := ch.Consume(q, "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for want := range batches * size {
		select {
		case d := <-deliveries:
			if d.MessageId != fmt.Sprint(want) {
				t.Fatalf("delivery %d is message %s", want, d.MessageId)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%d of %d messages arrived", want, batches*size)
		}
	}
}

// A batch given to Send after one that was not sent whole sends nothing,
// so that none of its messages overtakes the ones left unsent before it,
// and says so with ErrNotSent although its own ctx goes on.
func TestSendSendsNothingAfterABatchNotSentWhole(t *testing.T) {
	t.Parallel()
	p, ch := newPublisher(t, 1)
	q := testenv.Name(t, "q")
	testenv.CleanupQueues(t, q)
	if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	msgs := func(prefix string) []amqpx.Outgoing {
		return []amqpx.Outgoing{
			{RoutingKey: q, Msg: amqp.Publishing{MessageId: prefix + "0", Body: []byte("x")}},
			{RoutingKey: q, Msg: amqp.Publishing{MessageId: prefix + "1", Body: []byte("x")}},
		}
	}
	// The one in-flight slot frees only when a verdict is taken, so the
	// first batch's second message waits for it until its ctx ends.
	ctx, cancel := context.WithCancel(context.Background())
	first := p.Send(ctx, "", msgs("a"))
	second := p.Send(context.Background(), "", msgs("b"))
	cancel()
	first.Wait(func(int, error) {})
	calls := 0
	second.Wait(func(i int, err error) {
		calls++
		if !errors.Is(err, amqpx.ErrNotSent) || errors.Is(err, context.Canceled) {
			t.Errorf("second batch, message %d: got %v, want ErrNotSent for the batch before", i, err)
		}
	})
	if calls != 2 {
		t.Fatalf("%d verdicts for the second batch's 2 messages", calls)
	}
	if n := testenv.QueueDepth(t, ch, q); n > 1 {
		t.Fatalf("queue holds %d messages, want at most the first batch's first", n)
	}
}
