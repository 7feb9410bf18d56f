package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"
	goredis "github.com/redis/go-redis/v9"

	"github.com/warrenmq/warren/consumer"
	"github.com/warrenmq/warren/dedup"
	dedupredis "github.com/warrenmq/warren/dedup/redis"
	"github.com/warrenmq/warren/examples/app"
	"github.com/warrenmq/warren/examples/automation"
	"github.com/warrenmq/warren/examples/webhook"
	"github.com/warrenmq/warren/internal/amqpx"
	"github.com/warrenmq/warren/internal/httpserver"
	"github.com/warrenmq/warren/internal/redact"
	"github.com/warrenmq/warren/relay"
)

// Names are everything a pipeline creates on the services.
type Names struct {
	Exchange        string
	WebhookQueue    string
	AutomationQueue string
	WorkItems       string // table
	Outbox          string // table
	Rules           string // table
	Runs            string // table
	Dedup           string // table (automation's transactional dedup)
	RedisPrefix     string // webhook's dedup keys
}

// NamesWithPrefix derives every name from one prefix, which must be a
// lower-case SQL identifier.
func NamesWithPrefix(p string) Names {
	return Names{
		Exchange:        p + ".events",
		WebhookQueue:    p + ".webhook",
		AutomationQueue: p + ".automation",
		WorkItems:       p + "_work_items",
		Outbox:          p + "_outbox",
		Rules:           p + "_rules",
		Runs:            p + "_runs",
		Dedup:           p + "_dedup",
		RedisPrefix:     p + ":dedup:",
	}
}

// Config configures a pipeline.
type Config struct {
	AMQPURL, DatabaseURL, RedisURL string
	Names                          Names
	// Secret signs webhook deliveries. Default "demo-secret".
	Secret []byte
	// Answer decides the receiver's status per delivery (default 200).
	Answer func(eventID string, body []byte, seen int) int
	// RetryDelays are both consumers' retry tiers (default the consumer's).
	RetryDelays []time.Duration
	// MaxAttempts for both consumers (default the consumer's).
	MaxAttempts int
	Logger      *slog.Logger
}

// Pipeline is a running pipeline.
type Pipeline struct {
	App        *app.App
	Pool       *pgxpool.Pool
	Relay      *relay.Relay
	Webhook    *webhook.Service
	Automation *automation.Service
	Receiver   *webhook.Receiver
	// ReceiverURL is where the webhook service delivers.
	ReceiverURL string

	cfg    Config
	redis  *goredis.Client
	server *http.Server
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	errs   []error
}

// Start creates the tables and queues, then starts the receiver, the
// relay and both consumers, and returns once both consumers consume.
func Start(ctx context.Context, cfg Config) (_ *Pipeline, err error) {
	if len(cfg.Secret) == 0 {
		cfg.Secret = []byte("demo-secret")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	p := &Pipeline{cfg: cfg, Receiver: &webhook.Receiver{Secret: cfg.Secret, Answer: cfg.Answer}}
	defer func() {
		if err != nil {
			p.Stop()
		}
	}()
	if p.Pool, err = pgxpool.New(ctx, cfg.DatabaseURL); err != nil {
		return nil, redact.Error(err, cfg.DatabaseURL)
	}
	opts, err := goredis.ParseURL(cfg.RedisURL)
	if err != nil {
		return nil, redact.Error(err, cfg.RedisURL)
	}
	p.redis = goredis.NewClient(opts)
	if p.App, err = app.New(cfg.Names.WorkItems, cfg.Names.Outbox); err != nil {
		return nil, err
	}
	if err := p.App.Migrate(ctx, p.Pool); err != nil {
		return nil, fmt.Errorf("migrate the application: %w", redact.Error(err, cfg.DatabaseURL))
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p.ReceiverURL = "http://" + ln.Addr().String() + "/hook"
	p.server = httpserver.New("", p.Receiver)

	consumerConfig := func(queue string) consumer.Config {
		return consumer.Config{
			URL: cfg.AMQPURL, Name: queue, Exchange: cfg.Names.Exchange, Logger: cfg.Logger,
			RetryDelays: cfg.RetryDelays, MaxAttempts: cfg.MaxAttempts,
		}
	}
	store, err := dedupredis.New(p.redis, dedupredis.Config{Prefix: cfg.Names.RedisPrefix})
	if err != nil {
		return nil, err
	}
	if p.Webhook, err = webhook.New(webhook.Config{
		Consumer:  consumerConfig(cfg.Names.WebhookQueue),
		Endpoints: []webhook.Endpoint{{URL: p.ReceiverURL}},
		Secret:    cfg.Secret,
		Timeout:   5 * time.Second,
	}, store); err != nil {
		return nil, err
	}
	if p.Automation, err = automation.New(automation.Config{
		Consumer:   consumerConfig(cfg.Names.AutomationQueue),
		RulesTable: cfg.Names.Rules, RunsTable: cfg.Names.Runs, DedupTable: cfg.Names.Dedup,
	}, p.Pool, p.App); err != nil {
		return nil, err
	}
	if err := p.Automation.Migrate(ctx); err != nil {
		return nil, redact.Error(err, cfg.DatabaseURL)
	}
	if p.Relay, err = relay.New(relay.Config{
		Pool: p.Pool, AMQPURL: cfg.AMQPURL, Exchange: cfg.Names.Exchange, Table: cfg.Names.Outbox, Logger: cfg.Logger,
	}); err != nil {
		return nil, err
	}

	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	p.cancel = cancel
	p.goRun("receiver", func(context.Context) error {
		if err := p.server.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	}, runCtx)
	// The consumers first: their queues must be bound before the relay
	// publishes, or the first events would be unroutable.
	p.goRun("webhook consumer", p.Webhook.Run, runCtx)
	p.goRun("automation consumer", p.Automation.Run, runCtx)
	deadline := time.After(30 * time.Second)
	for !p.Webhook.Health().Ready || !p.Automation.Health().Ready {
		select {
		case <-deadline:
			return nil, fmt.Errorf("consumers not ready after 30s (is RabbitMQ at %s?): %w", amqpx.RedactURLs(cfg.AMQPURL), p.Err())
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
		if err := p.Err(); err != nil {
			return nil, err
		}
	}
	p.goRun("relay", p.Relay.Run, runCtx)
	return p, nil
}

func (p *Pipeline) goRun(name string, run func(context.Context) error, ctx context.Context) {
	p.wg.Go(func() {
		if err := run(ctx); err != nil {
			p.mu.Lock()
			p.errs = append(p.errs, fmt.Errorf("%s: %w", name, err))
			p.mu.Unlock()
		}
	})
}

// Err reports what made a part of the pipeline stop, if anything did.
func (p *Pipeline) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return errors.Join(p.errs...)
}

// Stop stops every part gracefully and waits for it.
func (p *Pipeline) Stop() error {
	if p.cancel != nil {
		p.cancel()
	}
	if p.server != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		p.server.Shutdown(ctx)
		cancel()
	}
	p.wg.Wait()
	if p.redis != nil {
		p.redis.Close()
	}
	if p.Pool != nil {
		p.Pool.Close()
	}
	return p.Err()
}

// Change runs f in one application transaction: f changes work items
// through the App and their events go to the outbox in the same commit.
func (p *Pipeline) Change(ctx context.Context, f func(tx pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, p.Pool, f)
}

// Publish sends msg straight to the exchange, bypassing the outbox: the
// way a duplicate delivery, or hostile input, reaches consumers.
func Publish(ctx context.Context, amqpURL, exchange string, msg amqp.Publishing) error {
	conn, err := amqpx.Dial(ctx, amqpURL, amqpx.DialOptions{Name: "warren pipeline publisher"})
	if err != nil {
		return err
	}
	defer amqpx.CloseConnection(conn, amqpx.CloseTimeout)
	pub, err := amqpx.NewPublisher(ctx, conn, 1)
	if err != nil {
		return err
	}
	defer pub.Close()
	return pub.Publish(ctx, exchange, "", msg)
}

// Destroy deletes everything a pipeline with these names created, whether
// or not it is running: queues, exchanges, tables and Redis keys.
func Destroy(ctx context.Context, cfg Config) error {
	var errs []error
	conn, err := amqpx.Dial(ctx, cfg.AMQPURL, amqpx.DialOptions{Name: "warren pipeline cleanup"})
	if err != nil {
		return err
	}
	defer amqpx.CloseConnection(conn, amqpx.CloseTimeout)
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	n := cfg.Names
	for _, c := range []string{n.WebhookQueue, n.AutomationQueue} {
		topo := consumer.TopologyFor(consumer.Config{Name: c, Exchange: n.Exchange, RetryDelays: cfg.RetryDelays})
		for _, q := range topo.Queues() {
			if _, err := ch.QueueDelete(q, false, false, false); err != nil {
				errs = append(errs, err)
			}
		}
		if err := ch.ExchangeDelete(topo.DLX, false, false); err != nil {
			errs = append(errs, err)
		}
	}
	if err := ch.ExchangeDelete(n.Exchange, false, false); err != nil {
		errs = append(errs, err)
	}

	pool, err := pgxpool.New(ctx, cfg.DatabaseURL)
	if err != nil {
		return redact.Error(err, cfg.DatabaseURL)
	}
	defer pool.Close()
	for _, table := range []string{n.WorkItems, n.Outbox, n.Outbox + "_migrations", n.Rules, n.Runs, n.Dedup} {
		if _, err := pool.Exec(ctx, "DROP TABLE IF EXISTS "+pgx.Identifier{table}.Sanitize()); err != nil {
			errs = append(errs, redact.Error(err, cfg.DatabaseURL))
		}
	}

	opts, err := goredis.ParseURL(cfg.RedisURL)
	if err != nil {
		return redact.Error(err, cfg.RedisURL)
	}
	rdb := goredis.NewClient(opts)
	defer rdb.Close()
	iter := rdb.Scan(ctx, 0, n.RedisPrefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		rdb.Del(ctx, iter.Val())
	}
	if err := iter.Err(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Stats sums what both consumers did.
func (p *Pipeline) Stats() (webhookStats, automationStats consumer.Stats) {
	return p.Webhook.Stats(), p.Automation.Stats()
}

var _ dedup.Store = (*dedupredis.Store)(nil)
