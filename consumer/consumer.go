package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/trace"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/internal/amqpx"
	"github.com/warrenmq/warren/internal/observeguard"
)

// BaseConsumer consumes one queue and runs handlers on its messages. Embed
// it in a service, register handlers by event-type prefix, add middleware,
// and call Run (or RunUntilSignal).
//
// It owns everything between the broker and the handler: dialing and
// reconnecting, declaring the queue with its dead-letter and retry
// topology, the worker pool, acknowledgements, retries, dead letters and the
// graceful drain on shutdown.
type BaseConsumer struct {
	cfg  Config
	topo Topology
	log  *slog.Logger
	// observe runs every call to cfg.Observer: a panic there must not
	// end the process with a delivery unacked (package observeguard).
	observe *observeguard.Guard
	host    string

	mu     sync.Mutex // guards router and mws until Run starts
	router router
	// unrouted: the event types no route took, for the warning.
	unrouted unrouted
	mws      []warren.Middleware
	started  atomic.Bool

	ready     atomic.Bool
	running   atomic.Bool
	forceStop chan struct{} // closed to skip the rest of the shutdown grace
	forceOnce sync.Once

	block  amqpx.BlockState // of the current session's connection
	stats  counters
	memory atomic.Pointer[memoryPlan] // of the latest session
	// memoryNote says once per process what an unstated broker limit
	// lets the consumer hold (planSession).
	memoryNote sync.Once
	parts      atomic.Pointer[partitionSet] // of the latest session, with Config.Partitions
	tracer     trace.Tracer                 // nil without Config.TracerProvider

	// adoptedArgs are the arguments the queue was adopted with
	// (Config.AdoptQueue), learned by the first declaration that found
	// it: a queue deleted later is declared again with them.
	adoptedArgs atomic.Pointer[amqp.Table]

	// beforeConsume, set only by tests, runs before each consumer channel
	// of a session is opened; an error fails the session's start.
	beforeConsume func(channel int) error
	// rebalanced, set only by tests, is called with the replica count
	// each time a partitioned session's rebalancer counted the replicas.
	rebalanced func(replicas int)
	// beforeRedeclare, set only by tests, runs before the topology is
	// declared again for a missing queue.
	beforeRedeclare func()
}

// ErrAlreadyRunning is returned by Run when the consumer is running or has
// run: a BaseConsumer runs once.
var ErrAlreadyRunning = errors.New("consumer: Run called twice")

// New validates cfg, applies its defaults and returns a consumer ready for
// handlers. It does not connect; Run does.
func New(cfg Config) (*BaseConsumer, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	c := &BaseConsumer{
		cfg:       cfg,
		topo:      TopologyFor(cfg),
		log:       cfg.Logger.With("consumer", cfg.Name),
		host:      amqpx.Hostname(),
		forceStop: make(chan struct{}),
	}
	c.observe = observeguard.New(c.log)
	c.router.unhandled = cfg.Unhandled
	if cfg.QueueType == Classic && len(amqpx.SplitURLs(cfg.URL)) > 1 {
		// A classic queue lives on the node that declared it: when that
		// node is down, the queue is too, whichever node the consumer
		// reconnects to.
		c.log.Warn("the URL names several broker nodes but QueueType is classic: the queues live on one node and are unavailable while it is down; use QueueType quorum on a cluster")
	}
	if cfg.TracerProvider != nil {
		c.tracer = cfg.TracerProvider.Tracer(tracerName)
	}
	return c, nil
}

// Config returns the consumer's configuration with defaults applied.
func (c *BaseConsumer) Config() Config { return c.cfg }

// Topology returns the names of the exchange and queues the consumer
// declares.
func (c *BaseConsumer) Topology() Topology { return c.topo }

// Handle registers h for events whose type starts with prefix. When several
// prefixes match, the longest wins; the empty prefix matches everything.
// Handle panics on a nil handler, a prefix registered twice, or a call after
// Run has started, like http.ServeMux: all three are programming errors
// found at start-up.
func (c *BaseConsumer) Handle(prefix string, h warren.Handler) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.mustNotHaveStarted("Handle")
	if err := c.router.add(prefix, h); err != nil {
		panic(err)
	}
}

// HandleFunc registers a function as the handler for prefix.
func (c *BaseConsumer) HandleFunc(prefix string, f func(context.Context, *warren.Message) error) {
	c.Handle(prefix, warren.HandlerFunc(f))
}

// Use appends middleware that wraps every handler. The first middleware
// added is the outermost: it sees the message first and the outcome last.
func (c *BaseConsumer) Use(mws ...warren.Middleware) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.mustNotHaveStarted("Use")
	c.mws = append(c.mws, mws...)
}

func (c *BaseConsumer) mustNotHaveStarted(method string) {
	if c.started.Load() {
		panic(fmt.Sprintf("consumer: %s called after Run", method))
	}
}

// handler builds the chain the workers call: middleware around the router.
func (c *BaseConsumer) handler() warren.Handler {
	c.mu.Lock()
	defer c.mu.Unlock()
	var h warren.Handler = &c.router
	for i := len(c.mws) - 1; i >= 0; i-- {
		h = c.mws[i](h)
	}
	return h
}

// Run consumes until ctx ends, then drains: it stops taking deliveries,
// lets running handlers finish for up to ShutdownGrace, cancels the
// contexts of those still running and requeues their messages, and closes
// the connection. Every round trip to the broker on the way out has a
// deadline (amqpx.CloseTimeout), so a broker that stopped reading the
// connection cannot hold the stop past ShutdownGrace plus a few seconds.
// It returns nil after a clean stop, or the error that made
// consuming impossible (a queue that exists with different arguments,
// missing permissions, credentials or a vhost the broker refuses at the
// start; refused after it was let in, the consumer keeps retrying and logs
// an error each time).
//
// Connection and channel failures are not errors: Run reconnects with
// backoff, declares the topology again and resumes.
func (c *BaseConsumer) Run(ctx context.Context) error {
	if !c.started.CompareAndSwap(false, true) {
		return ErrAlreadyRunning
	}
	c.stats.lastSettled.Store(time.Now().UnixNano()) // a stuck clock starts no earlier than Run
	c.running.Store(true)
	defer c.running.Store(false)
	h := c.handler()

	// Handlers get a context of their own: it outlives ctx by the shutdown
	// grace, so a handler is not cut off the moment shutdown begins.
	hctx, cancelHandlers := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelHandlers()

	jobs := make(chan job) // unbuffered: a delivery waits in the broker's prefetch, not in a queue of ours
	var workers sync.WaitGroup
	// With partitions, each session's dispatchers join workers instead
	// (one per partition subscription), and jobs stays unused.
	run := handlerRun{ctx: hctx, workers: &workers, h: func(ctx context.Context, p *partition, d amqp.Delivery, spent int) decision {
		return c.evaluateIn(ctx, h, d, p.queue, spent)
	}}
	if !c.topo.Partitioned() {
		for range c.cfg.Workers {
			workers.Go(func() {
				for j := range jobs {
					c.process(hctx, h, j)
				}
			})
		}
	}

	s, err := c.supervise(ctx, jobs, run)
	c.ready.Store(false)
	if s != nil {
		if c.cfg.Observer != nil {
			c.observe.Call("Disconnected", func() { c.cfg.Observer.Disconnected(c.cfg.Name, nil) })
		}
		s.stopConsuming()
	}
	close(jobs) // every sender (a session's forwarders) has stopped
	abandoned := c.drain(&workers, cancelHandlers)
	if s != nil {
		s.close()
	}
	if err == nil && abandoned {
		err = fmt.Errorf("consumer %s: handlers still running after shutdown; their messages return to the queue", c.cfg.Name)
	}
	c.log.Info("consumer stopped", "error", err)
	return err
}

// abandonAfter is how long Run waits, after cancelling handler contexts,
// for handlers that ignore their context. Their messages are requeued by
// the broker when the connection closes.
const abandonAfter = 5 * time.Second

// drain waits for the workers to finish, cancelling handler contexts when
// the grace period ends or a forced stop arrives. It reports whether some
// handler never returned.
func (c *BaseConsumer) drain(workers *sync.WaitGroup, cancelHandlers context.CancelFunc) bool {
	done := make(chan struct{})
	go func() {
		workers.Wait()
		close(done)
	}()
	if inFlight := c.stats.inFlight.Load(); inFlight > 0 {
		c.log.Info("draining in-flight handlers", "in_flight", inFlight, "grace", c.cfg.ShutdownGrace)
	}
	grace := time.NewTimer(c.cfg.ShutdownGrace)
	defer grace.Stop()
	select {
	case <-done:
		return false
	case <-grace.C:
		c.log.Warn("shutdown grace ended; cancelling running handlers and requeueing their messages", "in_flight", c.stats.inFlight.Load())
	case <-c.forceStop:
		c.log.Warn("forced stop; cancelling running handlers and requeueing their messages", "in_flight", c.stats.inFlight.Load())
	}
	cancelHandlers()
	select {
	case <-done:
		return false
	case <-time.After(abandonAfter):
		c.log.Error("handlers ignored cancellation; closing the connection under them", "in_flight", c.stats.inFlight.Load())
		return true
	}
}

// ForceStop cuts the shutdown grace short: running handlers' contexts are
// cancelled now. It has an effect only once Run's context has ended.
func (c *BaseConsumer) ForceStop() {
	c.forceOnce.Do(func() { close(c.forceStop) })
}

// supervise keeps a session alive until ctx ends. It returns the live
// session (nil if none) for the caller to drain, and a non-nil error only
// when retrying cannot help.
func (c *BaseConsumer) supervise(ctx context.Context, jobs chan<- job, run handlerRun) (*session, error) {
	// Two backoffs: DialRetry resets its own at every call, and would
	// otherwise keep every pause between failed starts at the first step
	// (a persistent failure redialled every ~100ms).
	bo := amqpx.NewBackOff(c.cfg.ReconnectMaxDelay)
	dial := amqpx.NewBackOff(c.cfg.ReconnectMaxDelay)
	for connected := false; ; {
		conn, err := amqpx.DialRetry(ctx, c.cfg.URL, amqpx.DialOptions{Name: c.connectionName()}, dial, c.log)
		if err != nil {
			if ctx.Err() != nil {
				return nil, nil // ctx ended while dialing
			}
			if connected {
				// Refused after it let this consumer in: the password or
				// the permissions changed under a running service, or
				// the broker's auth backend (LDAP, HTTP) is failing. The
				// latter passes; a service that stopped on it would need
				// a restart. Keep trying, loudly.
				c.log.Error("the broker refuses the consumer it let in before; retrying", "error", err)
				if !c.pause(ctx, bo, "reconnect refused", err) {
					return nil, nil
				}
				continue
			}
			// The broker refused the credentials or the vhost at the
			// start: the configuration is wrong, and no retry mends it.
			c.log.Error("cannot consume", "error", err)
			return nil, err
		}
		s, err := c.startSession(ctx, conn, jobs, run)
		if err != nil {
			var te *TopologyError
			if errors.As(err, &te) && te.fatal() || errors.Is(err, ErrOverMemoryBudget) {
				c.log.Error("cannot consume", "error", err)
				return nil, err
			}
			if !c.pause(ctx, bo, "could not start consuming", err) {
				return nil, nil
			}
			continue
		}
		if connected {
			c.stats.reconnects.Add(1)
		}
		if c.cfg.Observer != nil {
			reconnect := connected
			c.observe.Call("Connected", func() { c.cfg.Observer.Connected(c.cfg.Name, reconnect) })
		}
		connected = true
		mem := c.memory.Load()
		if c.topo.Partitioned() {
			c.log.Info("consuming", append([]any{"partitions", len(c.topo.PartitionQueues), "partition_exchange", c.topo.PartitionExchange,
				"exchange", c.topo.Exchange, "broker", conn.RemoteAddr().String(), "prefetch", mem.prefetch}, mem.logAttrs()...)...)
		} else {
			c.log.Info("consuming", append([]any{"queue", c.topo.Queue, "exchange", c.topo.Exchange, "broker", conn.RemoteAddr().String(),
				"channels", c.cfg.Channels, "prefetch", mem.prefetch, "workers", c.cfg.Workers}, mem.logAttrs()...)...)
		}
		// Ready after the line that says with what: whoever sees Ready
		// (a readiness probe, a test) finds the figures logged.
		c.ready.Store(true)
		started := time.Now()
		select {
		case <-ctx.Done():
			return s, nil
		case err := <-s.lost:
			c.ready.Store(false)
			if c.cfg.Observer != nil {
				c.observe.Call("Disconnected", func() { c.cfg.Observer.Disconnected(c.cfg.Name, err) })
			}
			s.abandon()
			c.log.Warn("lost the broker; reconnecting", "error", err)
			// A session that dies at once (the queue deleted under us, a
			// broker refusing work) must not turn into a hot loop.
			if time.Since(started) < time.Second && !c.pause(ctx, bo, "session ended at once", err) {
				return nil, nil
			}
			if time.Since(started) >= time.Second {
				bo.Reset()
			}
		}
	}
}

// pause waits out one backoff step, reporting false if ctx ended first.
func (c *BaseConsumer) pause(ctx context.Context, bo interface{ NextBackOff() time.Duration }, what string, err error) bool {
	wait := bo.NextBackOff()
	c.log.Warn(what+"; retrying", "error", err, "retry_in", wait.Round(time.Millisecond))
	select {
	case <-ctx.Done():
		return false
	case <-time.After(wait):
		return true
	}
}

func (c *BaseConsumer) connectionName() string {
	return fmt.Sprintf("warren consumer %s@%s", c.cfg.Name, c.host)
}
