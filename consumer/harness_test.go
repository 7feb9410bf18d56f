package consumer_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/consumer"
	"github.com/warrenmq/warren/internal/amqpx"
	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/internal/testenv/localrabbit"
)

// logLines is a log that workers may write to at once and the test reads
// back; when out is set, it is also written there (the test's output).
type logLines struct {
	mu  sync.Mutex
	buf bytes.Buffer
	out io.Writer
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf.Write(p)
	if l.out == nil {
		return len(p), nil
	}
	return l.out.Write(p)
}

func (l *logLines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func (l *logLines) has(s string) bool { return strings.Contains(l.String(), s) }

// newConsumer builds a consumer with unique names whose queues and
// exchanges are deleted when t ends. tweak adjusts the config.
func newConsumer(t *testing.T, tweak func(*consumer.Config)) *consumer.BaseConsumer {
	t.Helper()
	c := consumerAt(t, testenv.AMQPURL(t), tweak)
	topo := c.Topology()
	testenv.CleanupQueues(t, topo.Queues()...)
	testenv.CleanupExchanges(t, topo.Exchanges()...)
	return c
}

// consumerAt builds a consumer of the broker at url with unique names.
func consumerAt(t *testing.T, url string, tweak func(*consumer.Config)) *consumer.BaseConsumer {
	t.Helper()
	cfg := consumer.Config{
		URL:      url,
		Name:     testenv.Name(t, "c"),
		Exchange: testenv.Name(t, "ex"),
		Logger:   slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo})),
	}
	if tweak != nil {
		tweak(&cfg)
	}
	c, err := consumer.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// newNodeConsumer is newConsumer on a private broker node: its queues and
// exchanges are deleted there when t ends.
func newNodeConsumer(t *testing.T, node *localrabbit.Node, tweak func(*consumer.Config)) *consumer.BaseConsumer {
	t.Helper()
	c := consumerAt(t, node.URL(), tweak)
	deleteTopologyAfter(t, node, c.Topology())
	return c
}

// deleteTopologyAfter deletes topo's queues and exchanges on node when t
// ends.
func deleteTopologyAfter(t *testing.T, node *localrabbit.Node, topo consumer.Topology) {
	t.Cleanup(func() {
		conn, err := amqpx.Dial(context.Background(), node.URL(), amqpx.DialOptions{Name: t.Name() + " cleanup"})
		if err != nil {
			t.Errorf("cleanup: %v", err)
			return
		}
		defer amqpx.CloseConnection(conn, 5*time.Second)
		ch, err := conn.Channel()
		if err != nil {
			t.Errorf("cleanup: %v", err)
			return
		}
		for _, q := range topo.Queues() {
			ch.QueueDelete(q, false, false, false)
		}
		for _, x := range topo.Exchanges() {
			ch.ExchangeDelete(x, false, false)
		}
	})
}

// start runs c until the returned stop is called (or t ends) and waits
// until it consumes. stop returns Run's error.
func start(t *testing.T, c *consumer.BaseConsumer) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- c.Run(ctx) }()
	var once sync.Once
	var runErr error
	stop = func() error {
		once.Do(func() {
			cancel()
			runErr = <-errc
		})
		return runErr
	}
	t.Cleanup(func() { stop() })
	deadline := time.After(60 * time.Second)
	for !c.Health().Ready {
		select {
		case err := <-errc:
			errc <- err
			t.Fatalf("Run returned before consuming: %v", err)
		case <-deadline:
			t.Fatal("consumer not ready after 15s")
		case <-time.After(5 * time.Millisecond):
		}
	}
	return stop
}

// publisher publishes events to an exchange (or, with exchange "", to a
// queue) with confirms.
type publisher struct {
	t   *testing.T
	pub *amqpx.Publisher
}

func newPublisher(t *testing.T) *publisher {
	t.Helper()
	p, err := amqpx.NewPublisher(context.Background(), testenv.AMQPConn(t), 512)
	if err != nil {
		t.Fatal(err)
	}
	return &publisher{t: t, pub: p}
}

func event(id, typ string) warren.Event {
	return warren.Event{
		ID: id, Type: typ, EntityType: "issue", EntityID: "e-" + id, WorkspaceID: "w1", ProjectID: "p1",
		InitiatorID: "u1", InitiatorType: warren.InitiatorUser, Version: "1.0", CreatedAt: time.Now().UTC(),
		Payload: warren.Payload{Data: []byte(`{"state":"done","priority":"high","name":"Fix the relay"}`), PreviousAttributes: []byte(`{"state":"todo"}`)},
	}
}

func (p *publisher) events(exchange, key string, evs ...warren.Event) {
	p.t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, len(evs))
	for _, ev := range evs {
		msg, err := amqpx.EventPublishing(ev)
		if err != nil {
			p.t.Fatal(err)
		}
		wg.Go(func() { errs <- p.pub.Publish(context.Background(), exchange, key, msg) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			p.t.Fatal(err)
		}
	}
}

func (p *publisher) raw(exchange string, msg amqp.Publishing) {
	p.t.Helper()
	if err := p.pub.Publish(context.Background(), exchange, "", msg); err != nil {
		p.t.Fatal(err)
	}
}

func manyEvents(n int, prefix, typ string) []warren.Event {
	evs := make([]warren.Event, n)
	for i := range evs {
		evs[i] = event(fmt.Sprintf("%s-%05d", prefix, i), typ)
	}
	return evs
}

// recorder counts handler calls per event id.
type recorder struct {
	mu       sync.Mutex
	calls    map[string]int
	attempts map[string][]int
	changed  chan struct{}
}

func newRecorder() *recorder {
	return &recorder{calls: map[string]int{}, attempts: map[string][]int{}, changed: make(chan struct{}, 1)}
}

func (r *recorder) record(m *warren.Message) {
	r.mu.Lock()
	r.calls[m.Event.ID]++
	r.attempts[m.Event.ID] = append(r.attempts[m.Event.ID], m.Attempt)
	r.mu.Unlock()
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

func (r *recorder) count(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls[id]
}

func (r *recorder) distinct() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.calls)
}

// waitDistinct waits until n distinct events were handled.
func (r *recorder) waitDistinct(t *testing.T, n int, timeout time.Duration) {
	t.Helper()
	deadline := time.After(timeout)
	for r.distinct() < n {
		select {
		case <-r.changed:
		case <-deadline:
			t.Fatalf("handled %d distinct events of %d after %v", r.distinct(), n, timeout)
		}
	}
}

// getOne takes one message from queue, failing t if there is none within
// timeout.
func getOne(t *testing.T, ch *amqp.Channel, queue string, timeout time.Duration) amqp.Delivery {
	t.Helper()
	var d amqp.Delivery
	testenv.WaitFor(t, timeout, "a message in "+queue, func() bool {
		var ok bool
		var err error
		d, ok, err = ch.Get(queue, true)
		if err != nil {
			t.Fatalf("get from %s: %v", queue, err)
		}
		return ok
	})
	return d
}

var errBoom = errors.New("boom")

// getHealth asks a consumer's health endpoint at url and returns its status
// code and the Health it reported.
func getHealth(t *testing.T, url string) (int, consumer.Health) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var h consumer.Health
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, h
}

// runChild is the end of a test binary re-executed as a consumer process:
// it prints "ready" once c consumes, for the parent to wait on, and runs c
// until SIGTERM or SIGINT; it returns the process's exit code.
func runChild(c *consumer.BaseConsumer) int {
	go func() {
		for !c.Health().Ready {
			time.Sleep(5 * time.Millisecond) // polling readiness in the child, not synchronising the test
		}
		fmt.Println("ready")
	}()
	if err := c.RunUntilSignal(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}
