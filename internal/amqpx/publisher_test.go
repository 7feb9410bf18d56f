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
