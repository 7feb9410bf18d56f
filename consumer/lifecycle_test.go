package consumer_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/consumer"
	"github.com/warrenmq/warren/internal/amqpx"
	"github.com/warrenmq/warren/internal/testenv"
)

// The broker drops the consumer's connection twice while handlers hold
// unacked deliveries: every message is still handled, and consuming resumes
// without help.
func TestSurvivesConnectionLoss(t *testing.T) {
	t.Parallel()
	const n = 4000
	rec := newRecorder()
	// Handlers past each mark wait at a gate until the connection has been
	// killed, so the kill lands mid-stream with deliveries in flight.
	gates := []struct {
		mark int64
		open chan struct{}
	}{{n / 4, make(chan struct{})}, {n / 2, make(chan struct{})}}
	var seq atomic.Int64
	opened := make([]sync.Once, len(gates))
	open := func(i int) { opened[i].Do(func() { close(gates[i].open) }) }
	// On failure, let blocked handlers go so the consumer can stop.
	t.Cleanup(func() {
		for i := range gates {
			open(i)
		}
	})
	c := newConsumer(t, func(cfg *consumer.Config) { cfg.ReconnectMaxDelay = 500 * time.Millisecond })
	c.HandleFunc("", func(ctx context.Context, m *warren.Message) error {
		k := seq.Add(1)
		for _, g := range gates {
			if k > g.mark {
				<-g.open
			}
		}
		rec.record(m)
		return nil
	})
	stop := start(t, c)
	newPublisher(t).events(c.Topology().Exchange, "", manyEvents(n, "ev", "workitem.updated")...)

	for i := range gates {
		testenv.WaitFor(t, 60*time.Second, "handlers to block at the gate", func() bool {
			return c.Stats().InFlight == int64(c.Config().Workers)
		})
		if closed := testenv.CloseConnections(t, c.Config().Name); closed == 0 {
			t.Fatalf("kill %d: no connection of %s found to close", i+1, c.Config().Name)
		}
		testenv.WaitFor(t, 60*time.Second, "the consumer to reconnect", func() bool {
			return c.Stats().Reconnects >= uint64(i+1) && c.Health().Ready
		})
		open(i)
	}
	rec.waitDistinct(t, n, 60*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	dups := 0
	for _, calls := range rec.calls {
		dups += calls - 1
	}
	// The handlers blocked at a gate finished on a dead channel, so their
	// acks were lost and the broker redelivered: at-least-once, visibly.
	if dups < c.Config().Workers {
		t.Errorf("%d redeliveries; the %d handlers cut off by each kill should have been redelivered", dups, c.Config().Workers)
	}
	t.Logf("%d messages, 2 connection kills, %d redelivered", n, dups)
	if depth := testenv.QueueDepth(t, testenv.Channel(t), c.Topology().Queue); depth != 0 {
		t.Errorf("%d messages left in the queue", depth)
	}
}

// On stop, handlers already running finish and their messages are acked.
func TestStopLetsInFlightHandlersFinish(t *testing.T) {
	t.Parallel()
	started := make(chan string, 3)
	release := make(chan struct{})
	var finished atomic.Int32
	c := newConsumer(t, func(cfg *consumer.Config) { cfg.ShutdownGrace = 30 * time.Second })
	c.HandleFunc("", func(ctx context.Context, m *warren.Message) error {
		started <- m.Event.ID
		<-release
		finished.Add(1)
		return nil
	})
	stop := start(t, c)
	newPublisher(t).events(c.Topology().Exchange, "", manyEvents(3, "slow", "x.y")...)
	for range 3 {
		<-started
	}
	stopped := make(chan error)
	go func() { stopped <- stop() }()
	testenv.WaitFor(t, 60*time.Second, "readiness to drop", func() bool { return !c.Health().Ready })
	select {
	case err := <-stopped:
		t.Fatalf("Run returned (%v) while handlers were still running", err)
	default:
	}
	close(release)
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	if finished.Load() != 3 {
		t.Fatalf("%d handlers finished, want 3", finished.Load())
	}
	if depth := testenv.QueueDepth(t, testenv.Channel(t), c.Topology().Queue); depth != 0 {
		t.Errorf("%d messages back in the queue; finished handlers' messages must be acked", depth)
	}
}

// A handler still running when the grace period ends is cancelled and its
// message requeued as it was: no attempt counted, nothing dead-lettered.
func TestGraceShorterThanHandlerRequeues(t *testing.T) {
	t.Parallel()
	started := make(chan struct{})
	c := newConsumer(t, func(cfg *consumer.Config) { cfg.ShutdownGrace = 100 * time.Millisecond })
	c.HandleFunc("", func(ctx context.Context, m *warren.Message) error {
		close(started)
		<-ctx.Done()
		return ctx.Err()
	})
	stop := start(t, c)
	newPublisher(t).events(c.Topology().Exchange, "", event("long", "x.y"))
	<-started
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if s := c.Stats(); s.Requeued != 1 || s.Retried != 0 || s.DeadLettered != 0 {
		t.Errorf("stats %+v, want exactly 1 requeued", s)
	}
	ch := testenv.Channel(t)
	d := getOne(t, ch, c.Topology().Queue, 60*time.Second)
	if d.MessageId != "long" || d.Headers["x-warren-attempts"] != nil {
		t.Errorf("requeued message %q with headers %v; want it unchanged", d.MessageId, d.Headers)
	}
	for _, q := range append([]string{c.Topology().DLQ}, c.Topology().Retry[0].Queue) {
		if depth := testenv.QueueDepth(t, ch, q); depth != 0 {
			t.Errorf("%s holds %d messages", q, depth)
		}
	}
}

// A queue that exists with other arguments is an error naming the argument,
// returned by Run instead of retried forever.
func TestTopologyMismatchNamesTheArgument(t *testing.T) {
	t.Parallel()
	c := newConsumer(t, nil)
	ch := testenv.Channel(t)
	_, err := ch.QueueDeclare(c.Topology().Queue, true, false, false, false, amqp.Table{"x-message-ttl": int64(5000)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err = c.Run(ctx)
	var te *consumer.TopologyError
	if !errors.As(err, &te) || te.Argument != "x-message-ttl" || te.Name != c.Topology().Queue {
		t.Fatalf("Run = %v, want a TopologyError naming x-message-ttl on %s", err, c.Topology().Queue)
	}
}

// Declaring the same topology twice changes nothing and is not an error.
func TestRedeclaringIsANoOp(t *testing.T) {
	t.Parallel()
	first := newConsumer(t, nil)
	first.HandleFunc("", func(context.Context, *warren.Message) error { return nil })
	if err := start(t, first)(); err != nil {
		t.Fatal(err)
	}
	second, err := consumer.New(first.Config())
	if err != nil {
		t.Fatal(err)
	}
	second.HandleFunc("", func(context.Context, *warren.Message) error { return nil })
	if err := start(t, second)(); err != nil {
		t.Fatal(err)
	}
}

func TestHealthEndpoints(t *testing.T) {
	t.Parallel()
	c := newConsumer(t, nil)
	c.HandleFunc("", func(context.Context, *warren.Message) error { return nil })
	srv := httptest.NewServer(c.HealthHandler())
	defer srv.Close()
	status := func(path string) int {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var h consumer.Health
		if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
			t.Fatalf("%s body: %v", path, err)
		}
		return resp.StatusCode
	}
	if status("/healthz") != 503 || status("/readyz") != 503 {
		t.Error("a consumer that is not running reports healthy")
	}
	stop := start(t, c)
	if status("/healthz") != 200 || status("/readyz") != 200 {
		t.Error("a consuming consumer reports unhealthy")
	}
	stop()
	if status("/healthz") != 503 || status("/readyz") != 503 {
		t.Error("a stopped consumer reports healthy")
	}
}

// Handlers that hang make /healthz fail once StuckAfter has passed
// without any delivery finishing, and pass again when one finishes.
func TestHealthzReportsStuckHandlers(t *testing.T) {
	t.Parallel()
	c := newConsumer(t, func(cfg *consumer.Config) { cfg.StuckAfter = 100 * time.Millisecond })
	entered := make(chan struct{}, 1)
	release := make(chan struct{})
	c.HandleFunc("", func(ctx context.Context, _ *warren.Message) error {
		entered <- struct{}{}
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	})
	srv := httptest.NewServer(c.HealthHandler())
	defer srv.Close()
	healthz := func() (int, consumer.Health) { return getHealth(t, srv.URL+"/healthz") }
	start(t, c)
	unblock := sync.OnceFunc(func() { close(release) })
	t.Cleanup(unblock) // before the consumer's stop, which waits for the handler
	if code, h := healthz(); code != 200 || h.Stuck {
		t.Fatalf("an idle consumer: /healthz %d, %+v; want 200, not stuck", code, h)
	}
	newPublisher(t).events(c.Config().Exchange, "", event("stuck-1", "workitem.updated"))
	<-entered
	testenv.WaitFor(t, 60*time.Second, "/healthz to report the hanging handler", func() bool {
		code, h := healthz()
		return code == 503 && h.Stuck && h.Alive
	})
	unblock()
	testenv.WaitFor(t, 60*time.Second, "/healthz to pass once the handler finished", func() bool {
		code, h := healthz()
		return code == 200 && !h.Stuck
	})
}

func TestRunTwiceIsAnError(t *testing.T) {
	t.Parallel()
	c := newConsumer(t, nil)
	start(t, c)
	if err := c.Run(context.Background()); !errors.Is(err, consumer.ErrAlreadyRunning) {
		t.Fatalf("second Run = %v", err)
	}
}

// A consumer given two addresses of the broker (standing in for two
// nodes of a cluster) keeps consuming when the address it is connected to
// goes away: it reconnects through the other one by itself.
func TestFailsOverToAnotherAddressOfTheList(t *testing.T) {
	t.Parallel()
	brokerURL := testenv.AMQPURL(t)
	u, _ := url.Parse(brokerURL)
	a, b := testenv.StartAMQPProxy(t, u.Host), testenv.StartAMQPProxy(t, u.Host)
	rec := newRecorder()
	c := newConsumer(t, func(cfg *consumer.Config) {
		cfg.URL = a.URL(t, brokerURL) + "," + b.URL(t, brokerURL)
		cfg.ReconnectMaxDelay = 500 * time.Millisecond
	})
	c.HandleFunc("", func(ctx context.Context, m *warren.Message) error {
		rec.record(m)
		return nil
	})
	start(t, c)
	pub := newPublisher(t)
	// Each phase takes one address away and brings the other back, so at
	// least one of the two phases cuts the connection in use.
	for i, down := range []*testenv.Proxy{a, b} {
		up := b
		if down == b {
			up = a
		}
		up.SetUp(true)
		down.SetUp(false)
		testenv.WaitFor(t, 60*time.Second, "the consumer to be connected", func() bool { return c.Health().Ready })
		pub.events(c.Topology().Exchange, "", manyEvents(100, fmt.Sprintf("phase%d", i), "workitem.updated")...)
		rec.waitDistinct(t, 100*(i+1), 60*time.Second)
	}
	if got := c.Stats().Reconnects; got < 1 {
		t.Fatalf("%d reconnects: the second phase must have cut the connection in use", got)
	}
}

// Several nodes with classic queues is a cluster whose queues die with
// one node: the consumer says so when it is built, and only then.
func TestWarnsOfClassicQueuesOnSeveralNodes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		url  string
		typ  consumer.QueueType
		warn bool
	}{
		{"amqp://h1/,amqp://h2/", consumer.Classic, true},
		{"amqp://h1/,amqp://h2/", consumer.Quorum, false},
		{"amqp://h1/", consumer.Classic, false},
	} {
		var log logLines
		_, err := consumer.New(consumer.Config{URL: tc.url, Name: "n", QueueType: tc.typ,
			Logger: slog.New(slog.NewTextHandler(&log, nil))})
		if err != nil {
			t.Fatal(err)
		}
		if got := log.has("use QueueType quorum on a cluster"); got != tc.warn {
			t.Errorf("%s with %s queues: warned %v, want %v (log: %s)", tc.url, tc.typ, got, tc.warn, log.String())
		}
	}
}

// A broker that refuses the consumer's password ends Run at once with that
// error (matching amqpx.ErrRefused), rather than redialling forever as if
// the broker were down.
func TestRunEndsWhenTheBrokerRefusesTheCredentials(t *testing.T) {
	t.Parallel()
	u, err := url.Parse(testenv.AMQPURL(t))
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(u.User.Username(), "wrong-secret")
	c := consumerAt(t, u.String(), nil)
	c.HandleFunc("", func(context.Context, *warren.Message) error { return nil })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = c.Run(ctx)
	if !errors.Is(err, amqpx.ErrRefused) || ctx.Err() != nil || !strings.Contains(err.Error(), "refused the credentials") {
		t.Fatalf("Run = %v (context: %v), want the refusal before the context ends", err, ctx.Err())
	}
}
