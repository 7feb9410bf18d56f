package relay_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/outbox"
	"github.com/warrenmq/warren/relay"
)

// env is one test's outbox table, exchange and bound queue, all unique to
// the test and removed when it ends.
type env struct {
	t        *testing.T
	ob       *testenv.OutboxTable
	pool     *pgxpool.Pool
	outbox   *outbox.Table
	table    string
	exchange string
	queue    string
	ch       *amqp.Channel
	claims   claimLog // what the test's relays claimed
}

func newEnv(t *testing.T) *env {
	t.Helper()
	ob := testenv.NewOutboxTable(t)
	e := &env{t: t, ob: ob, pool: ob.Pool, outbox: ob.Table, table: ob.Table.Name(), exchange: testenv.Name(t, "ex"), queue: testenv.Name(t, "q")}
	testenv.CleanupExchanges(t, e.exchange)
	testenv.CleanupQueues(t, e.queue)
	e.ch = testenv.Channel(t)
	if err := e.ch.ExchangeDeclare(e.exchange, "fanout", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	return e
}

// bindQueue declares the test's queue and binds it to the exchange.
func (e *env) bindQueue() {
	e.t.Helper()
	if _, err := e.ch.QueueDeclare(e.queue, true, false, false, false, nil); err != nil {
		e.t.Fatal(err)
	}
	if err := e.ch.QueueBind(e.queue, "", e.exchange, false, nil); err != nil {
		e.t.Fatal(err)
	}
}

// refusePoison routes the exchange by event type through a topic
// exchange: "good.#" to the test's queue, "poison.#" to a queue that refuses
// every message, so the broker nacks those.
func (e *env) refusePoison() {
	e.t.Helper()
	router, refuser := testenv.Name(e.t, "router"), testenv.Name(e.t, "refuser")
	testenv.CleanupExchanges(e.t, router)
	testenv.CleanupQueues(e.t, refuser)
	for _, err := range []error{
		e.ch.ExchangeDeclare(router, "topic", true, false, false, false, nil),
		e.ch.ExchangeBind(router, "#", e.exchange, false, nil),
		declareQueue(e.ch, e.queue, nil),
		e.ch.QueueBind(e.queue, "good.#", router, false, nil),
		declareQueue(e.ch, refuser, refusing),
		e.ch.QueueBind(refuser, "poison.#", router, false, nil),
	} {
		if err != nil {
			e.t.Fatal(err)
		}
	}
}

// refusing are the arguments of a queue that refuses every message (at
// its length limit of 0, with reject-publish), so the broker nacks it.
var refusing = amqp.Table{"x-max-length": int32(0), "x-overflow": "reject-publish"}

func declareQueue(ch *amqp.Channel, name string, args amqp.Table) error {
	_, err := ch.QueueDeclare(name, true, false, false, false, args)
	return err
}

// config is a relay configuration for the test's table and exchange, with
// retry and poll delays short enough for tests. Lease and PublishTimeout
// are the product's defaults: a busy CI machine can take seconds to
// confirm a batch, and a publish that times out is retried (a duplicate).
func (e *env) config(name string) relay.Config {
	return relay.Config{
		DatabaseURL:       testenv.DatabaseURL(e.t),
		AMQPURL:           testenv.AMQPURL(e.t),
		Exchange:          e.exchange,
		Table:             e.table,
		Name:              name,
		Lease:             relay.DefaultLease,
		PublishTimeout:    relay.DefaultPublishTimeout,
		RetryMin:          20 * time.Millisecond,
		RetryMax:          200 * time.Millisecond,
		PollMin:           10 * time.Millisecond,
		PollMax:           200 * time.Millisecond,
		ReconnectMaxDelay: 500 * time.Millisecond,
		Logger:            testLogger(e.t),
	}
}

// running is a relay started by env.start.
type running struct {
	relay  *relay.Relay
	cancel context.CancelFunc // asks Run to stop, without waiting
	stop   func() error       // asks Run to stop and waits for its result
}

// start runs a relay until stop is called or the test ends. setup runs
// between New and Run (to install hooks). Its claims are recorded in
// e.claims.
func (e *env) start(cfg relay.Config, setup ...func(*relay.Relay)) *running {
	e.t.Helper()
	r, err := relay.New(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	relay.SetAfterClaimHook(r, e.claims.record)
	for _, f := range setup {
		f(r)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	run := &running{relay: r, cancel: cancel}
	run.stop = sync.OnceValue(func() error {
		cancel()
		// Far above the documented PublishTimeout + 5s: this only keeps a
		// hung stop from hanging the test; TestStopWhileTheBrokerStopsReading
		// holds the relay to its bound.
		const limit = 60 * time.Second
		select {
		case err := <-done:
			return err
		case <-time.After(limit):
			return fmt.Errorf("relay %s did not stop within %v", cfg.Name, limit)
		}
	})
	e.t.Cleanup(func() {
		if err := run.stop(); err != nil {
			e.t.Errorf("relay %s: %v", cfg.Name, err)
		}
	})
	return run
}

// publish writes evs in one committed transaction.
func (e *env) publish(evs ...warren.Event) { e.t.Helper(); e.ob.Publish(evs...) }

// publishN writes n events with ids prefix-0 … prefix-(n-1).
func (e *env) publishN(prefix string, n int) []string { e.t.Helper(); return e.ob.PublishN(prefix, n) }

var event = testenv.OutboxEvent

// count returns how many rows of the test's table match where.
func (e *env) count(where string, args ...any) int { e.t.Helper(); return e.ob.Count(where, args...) }

// exec runs sql with {table} replaced by the test's table.
func (e *env) exec(sql string, args ...any) { e.t.Helper(); e.ob.Exec(sql, args...) }

// collector counts the messages of a queue by message id.
type collector struct {
	mu     sync.Mutex
	counts map[string]int
	first  map[string]time.Time
	order  []amqp.Delivery
	total  int
}

// consume collects everything that reaches queue until the test ends.
func consume(t *testing.T, queue string) *collector {
	t.Helper()
	ch, err := testenv.AMQPConn(t).Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Qos(1000, 0, false); err != nil {
		t.Fatal(err)
	}
	deliveries, err := ch.Consume(queue, "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := &collector{counts: map[string]int{}, first: map[string]time.Time{}}
	var wg sync.WaitGroup
	wg.Go(func() {
		for d := range deliveries {
			now := time.Now()
			c.mu.Lock()
			if c.counts[d.MessageId] == 0 {
				c.first[d.MessageId] = now
			}
			c.counts[d.MessageId]++
			c.total++
			c.order = append(c.order, d)
			c.mu.Unlock()
		}
	})
	t.Cleanup(func() {
		ch.Close()
		wg.Wait()
	})
	return c
}

func (c *collector) distinct() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.counts)
}

func (c *collector) has(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.counts[id] > 0
}

func (c *collector) receivedAt(id string) (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	at, ok := c.first[id]
	return at, ok
}

func (c *collector) deliveries() []amqp.Delivery {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]amqp.Delivery(nil), c.order...)
}

// claimLog records, for each event, the most attempts any claim of its
// row had spent: a claim spends one, a release gives it back, so that is
// how many claims may have published it. Claims by a relay outside the
// test process (a killed child) are counted by the next claim's attempts.
// That holds while releases give back only attempts whose publish never
// reached the broker; a publish the broker blocked is given back too and
// may have reached it, so a test that can meet a blocked broker counts
// publishes with the Observer instead.
type claimLog struct {
	mu       sync.Mutex
	attempts map[string]int
}

func (l *claimLog) record(rows []outbox.Row) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.attempts == nil {
		l.attempts = map[string]int{}
	}
	for _, r := range rows {
		l.attempts[r.Event.ID] = max(l.attempts[r.Event.ID], r.Attempts)
	}
}

func (l *claimLog) publishes(id string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.attempts[id]
}

// requireOnce fails t unless every id arrived, nothing else arrived, and
// an id arrived more than once only as often as its row was published:
// delivery is at least once, and a duplicate must be explained by a claim
// that was retried (a publish that failed or timed out, or a lease that
// lapsed). It returns how many duplicates arrived.
func (c *collector) requireOnce(t *testing.T, ids []string, claims *claimLog) int {
	t.Helper()
	dups := c.requireOnly(t, ids)
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, id := range ids {
		if n := c.counts[id]; n > max(1, claims.publishes(id)) {
			t.Errorf("event %s arrived %d times but its row was published at most %d times", id, n, claims.publishes(id))
		}
	}
	if dups > 0 {
		t.Logf("%d duplicates of %d events, each after a retried claim", dups, len(ids))
	}
	return dups
}

// requireOnly fails t unless every id arrived and nothing else did. It
// returns how many duplicates arrived.
func (c *collector) requireOnly(t *testing.T, ids []string) int {
	t.Helper()
	c.requireAll(t, ids)
	c.mu.Lock()
	defer c.mu.Unlock()
	want := make(map[string]bool, len(ids))
	for _, id := range ids {
		want[id] = true
	}
	dups := 0
	for id, n := range c.counts {
		if !want[id] {
			t.Errorf("event %s arrived %d times and is not one of the test's", id, n)
		}
		dups += n - 1
	}
	return dups
}

// requireAll fails t unless every id arrived at least once.
func (c *collector) requireAll(t *testing.T, ids []string) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	missing := 0
	for _, id := range ids {
		if c.counts[id] == 0 {
			if missing < 5 {
				t.Errorf("event %s never arrived", id)
			}
			missing++
		}
	}
	if missing > 0 {
		t.Fatalf("%d of %d events never arrived", missing, len(ids))
	}
}

func (c *collector) waitDistinct(t *testing.T, n int, timeout time.Duration) {
	t.Helper()
	testenv.WaitFor(t, timeout, fmt.Sprintf("%d distinct events", n), func() bool { return c.distinct() >= n })
}

// counter counts hook calls and lets a test wait for the next one.
type counter struct {
	n atomic.Int64
}

func (c *counter) inc()         { c.n.Add(1) }
func (c *counter) value() int64 { return c.n.Load() }
func (c *counter) hook() func() { return c.inc }
func (c *counter) waitAbove(t *testing.T, v int64, what string) {
	t.Helper()
	testenv.WaitFor(t, 60*time.Second, what, func() bool { return c.value() > v })
}

// takeOver starts a fresh relay and requires that every id then arrives,
// once unless its row was published again: what an earlier relay left
// behind is delivered, and nothing it already delivered comes again.
func (e *env) takeOver(got *collector, ids []string) {
	e.t.Helper()
	e.start(e.config(testenv.Name(e.t, "takeover")))
	got.waitDistinct(e.t, len(ids), 2*relay.DefaultLease)
	got.requireOnce(e.t, ids, &e.claims)
}

// requireDelivered waits until every id has arrived and every row of the
// table (all kept, KeepDelivered) is marked delivered: nothing is lost,
// and nothing is marked delivered that did not arrive.
func (e *env) requireDelivered(got *collector, ids []string) {
	e.t.Helper()
	// Long enough for a lease to lapse: a claim whose reply was lost
	// waits for it.
	got.waitDistinct(e.t, len(ids), 3*relay.DefaultLease)
	got.requireAll(e.t, ids)
	testenv.WaitFor(e.t, 60*time.Second, "every row delivered", func() bool { return e.count("state = 'delivered'") == len(ids) })
	if n := e.count("true"); n != len(ids) {
		e.t.Fatalf("the table holds %d rows for %d events", n, len(ids))
	}
}

// hold stops a relay right after its first claim, holding the claimed
// rows, until released (or the test ends).
type hold struct {
	t        *testing.T
	claimed  chan []outbox.Row
	released chan struct{}
	once     sync.Once
}

func newHold(t *testing.T) *hold {
	return &hold{t: t, claimed: make(chan []outbox.Row, 1), released: make(chan struct{})}
}

// install is an env.start setup function.
func (h *hold) install(r *relay.Relay) {
	first := true
	relay.SetAfterClaimHook(r, func(rows []outbox.Row) {
		if !first {
			return
		}
		first = false
		h.claimed <- rows
		select {
		case <-h.released:
		case <-h.t.Context().Done(): // the test ended: let the relay stop
		}
	})
}

// wait returns the rows of the first claim.
func (h *hold) wait() []outbox.Row {
	h.t.Helper()
	select {
	case rows := <-h.claimed:
		return rows
	case <-time.After(60 * time.Second):
		h.t.Fatal("the relay claimed nothing within 60s")
		return nil
	}
}

// release lets the relay go on.
func (h *hold) release() { h.once.Do(func() { close(h.released) }) }

// testLogger sends the relay's warnings and errors to the test log.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// producer writes events from a goroutine, paced by a ticker, until
// finished: load that keeps flowing while a test breaks connections.
type producer struct {
	e      *env
	prefix string
	ids    []string
	err    error
	quit   chan struct{}
	wg     sync.WaitGroup
}

func (e *env) startProducer(prefix string, perTick int, every time.Duration) *producer {
	p := &producer{e: e, prefix: prefix, quit: make(chan struct{})}
	p.wg.Go(func() {
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-p.quit:
				return
			case <-tick.C:
			}
			if err := p.write(perTick); err != nil {
				p.err = err
				return
			}
		}
	})
	e.t.Cleanup(func() { p.finish() })
	return p
}

func (p *producer) write(n int) error {
	ctx := context.Background()
	tx, err := p.e.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	var batch []warren.Event
	for range n {
		batch = append(batch, event(fmt.Sprintf("%s-%d", p.prefix, len(p.ids)+len(batch))))
	}
	if _, err := p.e.outbox.PublishBatch(ctx, tx, batch); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	for _, ev := range batch {
		p.ids = append(p.ids, ev.ID)
	}
	return nil
}

// finish stops the producer and returns the ids of the events it committed.
func (p *producer) finish() []string {
	select {
	case <-p.quit:
	default:
		close(p.quit)
	}
	p.wg.Wait()
	if p.err != nil {
		p.e.t.Fatalf("producer: %v", p.err)
	}
	return p.ids
}
