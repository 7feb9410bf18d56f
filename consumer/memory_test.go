package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/consumer"
	"github.com/warrenmq/warren/internal/amqpx"
	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/internal/testenv/localrabbit"
)

// The private node's max_message_size in these tests.
const nodeLimit = 256 << 10

func captureLog(t *testing.T, cfg *consumer.Config) *logLines {
	l := &logLines{out: t.Output()}
	cfg.Logger = slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelInfo}))
	return l
}

// bigEvents are n events whose bodies are a little under size bytes.
func bigEvents(t *testing.T, n, size int) []warren.Event {
	evs := manyEvents(n, "big", "workitem.updated")
	for i := range evs {
		evs[i].Payload.Data = fmt.Appendf(nil, `{"blob":%q}`, strings.Repeat("x", size-2048))
		msg, err := amqpx.EventPublishing(evs[i])
		if err != nil {
			t.Fatal(err)
		}
		if len(msg.Body) > size {
			t.Fatalf("test event of %d bytes, over %d", len(msg.Body), size)
		}
	}
	return evs
}

// With a memory budget, the consumer lowers its prefetch so that the
// broker's largest messages fit, and the broker then never has more than
// that many deliveries out to it, however many workers are idle: the
// bound is on the broker's side, not ours.
func testMemoryBudgetLowersPrefetch(t *testing.T) {
	node := localrabbit.Shared(t)
	node.SetMaxMessageSize(t, nodeLimit)
	const channels, workers, wantPrefetch = 2, 8, 3
	// 8 workers × 256 KiB decoding + 2 channels × 3 × 256 KiB in flight.
	budget := int64(workers*nodeLimit + channels*wantPrefetch*nodeLimit)
	var log *logLines
	c := newNodeConsumer(t, node, func(cfg *consumer.Config) {
		cfg.Channels, cfg.Prefetch, cfg.Workers, cfg.MemoryBudget = channels, 100, workers, budget
		log = captureLog(t, cfg)
	})
	release := make(chan struct{})
	var inHandler, most atomic.Int64
	c.HandleFunc("", func(context.Context, *warren.Message) error {
		n := inHandler.Add(1)
		defer inHandler.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		<-release
		return nil
	})
	start(t, c)
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unblock) // before the consumer stops, on failure too
	if h := c.Health(); h.Prefetch != wantPrefetch || h.WorstCaseBytes != budget {
		t.Errorf("Health reports prefetch %d, worst case %d; want %d, %d", h.Prefetch, h.WorstCaseBytes, wantPrefetch, budget)
	}
	for _, want := range []string{"prefetch lowered", "effective_prefetch=3", "max_message_size_source=probed", fmt.Sprintf("broker_max_message_size=%d", nodeLimit)} {
		if !log.has(want) {
			t.Errorf("the start-up log does not say %q", want)
		}
	}

	conn, err := amqpx.Dial(context.Background(), node.URL(), amqpx.DialOptions{Name: t.Name()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { amqpx.CloseConnection(conn, 5*time.Second) })
	pub, err := amqpx.NewPublisher(context.Background(), conn, 40)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	for _, ev := range bigEvents(t, 40, nodeLimit) {
		msg, _ := amqpx.EventPublishing(ev)
		if err := pub.Publish(context.Background(), c.Config().Exchange, "", msg); err != nil {
			t.Fatal(err)
		}
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	const inFlight = channels * wantPrefetch
	queue := c.Topology().Queue
	// All 40 are confirmed, so each is ready in the queue or delivered;
	// with 8 idle workers, every delivery reaches a handler and stays there.
	testenv.WaitFor(t, time.Minute, "the deliveries to reach the handlers", func() bool { return inHandler.Load() >= inFlight })
	if ready, held := testenv.QueueDepth(t, ch, queue), inHandler.Load(); ready != 40-inFlight || held != inFlight {
		t.Errorf("%d messages ready and %d in handlers, want %d and %d: the broker sent more than channels × prefetch", ready, held, 40-inFlight, inFlight)
	}
	unblock()
	testenv.WaitFor(t, time.Minute, "all 40 handled", func() bool { return c.Stats().Done == 40 })
	if m := most.Load(); m > inFlight {
		t.Errorf("%d handlers ran at once, more than the %d deliveries the budget admits", m, inFlight)
	}
}

// A budget that cannot hold one of the broker's largest messages per
// channel stops Run with an error that names the numbers and the fixes.
func testMemoryBudgetTooSmallRefusesToStart(t *testing.T) {
	node := localrabbit.Shared(t)
	node.SetMaxMessageSize(t, nodeLimit)
	c := newNodeConsumer(t, node, func(cfg *consumer.Config) {
		cfg.Channels, cfg.Workers, cfg.MemoryBudget = 4, 1, 1<<20 // 4 × 256 KiB + 1 × 256 KiB > 1 MiB
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := c.Run(ctx)
	if !errors.Is(err, consumer.ErrOverMemoryBudget) {
		t.Fatalf("Run = %v, want ErrOverMemoryBudget", err)
	}
	for _, want := range []string{"1048576", "4 channels", fmt.Sprintf("max_message_size %d bytes (probed)", nodeLimit), "raise Config.MemoryBudget", "lower the broker's max_message_size"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

// A broker under a memory alarm blocks the probe's publish. Start must not
// hang on it: the block ends the probe at once, a consumer without a
// budget plans with RabbitMQ's maximum limit and consumes (on a
// connection the probe never published on, so the broker keeps reading
// it), and one with a budget that maximum would not fit waits for the
// alarm to lift instead of refusing for good.
func testSizeProbeUnderAlarmDoesNotHangStart(t *testing.T) {
	node := localrabbit.Shared(t)
	node.SetMaxMessageSize(t, nodeLimit)
	var plainLog, budgetLog *logLines
	plain := newNodeConsumer(t, node, func(cfg *consumer.Config) { plainLog = captureLog(t, cfg) })
	budgeted := newNodeConsumer(t, node, func(cfg *consumer.Config) {
		cfg.Channels, cfg.Workers, cfg.MemoryBudget, cfg.ReconnectMaxDelay = 1, 1, 65<<20, 500*time.Millisecond
		budgetLog = captureLog(t, cfg)
	})
	for _, c := range []*consumer.BaseConsumer{plain, budgeted} {
		c.HandleFunc("", func(context.Context, *warren.Message) error { return nil })
	}

	lift := node.Alarm(t)
	start(t, plain)
	if h := plain.Health(); h.Prefetch != consumer.DefaultPrefetch {
		t.Errorf("prefetch %d under the alarm, want the default %d", h.Prefetch, consumer.DefaultPrefetch)
	}
	for _, want := range []string{"could not read the broker's max_message_size", "blocked the probe's connection", "max_message_size_source=assumed"} {
		if !plainLog.has(want) {
			t.Errorf("the start-up log does not say %q", want)
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- budgeted.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	testenv.WaitFor(t, time.Minute, "a start refused for the unknown limit", func() bool {
		return budgetLog.has("max_message_size is unknown and RabbitMQ's maximum does not fit")
	})
	if !budgetLog.has("size probe failed: the broker blocked the probe's connection") {
		t.Error("the refusal does not say the broker blocked the probe")
	}
	select {
	case err := <-done:
		done <- err
		t.Fatalf("Run returned under the alarm: %v; want it to wait for the limit", err)
	default:
	}
	lift()
	testenv.WaitFor(t, time.Minute, "the budgeted consumer to start once the alarm lifted", func() bool { return budgeted.Health().Ready })
	if h := budgeted.Health(); h.Prefetch != consumer.DefaultPrefetch {
		// 65 MiB holds 1 × 256 × 256 KiB + 256 KiB: no lowering needed;
		// the assumed 512 MiB did not fit.
		t.Errorf("prefetch %d, want %d with the probed limit", h.Prefetch, consumer.DefaultPrefetch)
	}
}

// The shared broker accepts the probe (its limit is the 3.x default,
// 128 MiB, above MaxBodyBytes+1), so the consumer does not learn its
// limit, which could have been raised as far as RabbitMQ's maximum of
// 512 MiB. Under a budget it plans with that maximum: a budget that only
// a smaller limit would fit refuses to start and names the fixes, and one
// that fits the maximum gets the prefetch the maximum allows. The log
// states the worst case as a range, not as a figure that looks exact.
func TestMemoryBudgetWithAnUnknownLimitPlansAtTheMaximum(t *testing.T) {
	t.Parallel()
	const maxLimit = 512 << 20
	t.Run("refused", func(t *testing.T) {
		t.Parallel()
		// 1 channel × 1 × 128 MiB + 1 MiB would fit; 512 MiB does not.
		c := newConsumer(t, func(cfg *consumer.Config) {
			cfg.Channels, cfg.Workers, cfg.MemoryBudget = 1, 1, 256<<20
		})
		c.HandleFunc("", func(context.Context, *warren.Message) error { return nil })
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- c.Run(ctx) }()
		var err error
		returned := false
		testenv.WaitFor(t, time.Minute, "Run to refuse or the consumer to start", func() bool {
			select {
			case err = <-done:
				returned = true
				return true
			default:
				return c.Health().Ready
			}
		})
		if !returned {
			h := c.Health()
			cancel()
			<-done
			t.Fatalf("started with prefetch %d and a worst case of %d bytes, over the budget if the broker's limit was raised", h.Prefetch, h.WorstCaseBytes)
		}
		if !errors.Is(err, consumer.ErrOverMemoryBudget) {
			t.Fatalf("Run = %v, want ErrOverMemoryBudget", err)
		}
		for _, want := range []string{"268435456", fmt.Sprintf("max_message_size %d bytes (assumed", maxLimit), "Config.BrokerMaxMessageSize", "at most MaxBodyBytes (1048576)"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not say %q", err, want)
			}
		}
	})
	t.Run("planned", func(t *testing.T) {
		t.Parallel()
		const budget = 4*maxLimit + 1<<20 // prefetch 4 of 512 MiB + 1 worker × 1 MiB
		var log *logLines
		c := newConsumer(t, func(cfg *consumer.Config) {
			cfg.Channels, cfg.Prefetch, cfg.Workers, cfg.MemoryBudget = 1, 10, 1, budget
			log = captureLog(t, cfg)
		})
		c.HandleFunc("", func(context.Context, *warren.Message) error { return nil })
		start(t, c)
		if h := c.Health(); h.Prefetch != 4 || h.WorstCaseBytes != budget {
			t.Errorf("Health reports prefetch %d, worst case %d; want 4, %d", h.Prefetch, h.WorstCaseBytes, int64(budget))
		}
		for _, want := range []string{"max_message_size_source=assumed", "broker_max_message_size_at_least=1048577", fmt.Sprintf("worst_case_bytes_at_most=%d", int64(budget))} {
			if !log.has(want) {
				t.Errorf("the start-up log does not say %q", want)
			}
		}
		if log.has("worst_case_bytes=") {
			t.Error("the start-up log states an exact worst case for an unknown limit")
		}
	})
}

// A broker nobody configured (the test broker: it accepts the probe, so
// its limit is unknown) gets no warning: a first start must not show one
// its user cannot act on. The consumer notes the figures once per process
// at Info, not at every reconnect, and Health reports the worst case at
// the broker version's default with the maximum beside it.
func TestStockBrokerGetsNoMemoryWarning(t *testing.T) {
	t.Parallel()
	var log *logLines
	c := newConsumer(t, func(cfg *consumer.Config) { log = captureLog(t, cfg) })
	c.HandleFunc("", func(context.Context, *warren.Message) error { return nil })
	start(t, c)
	if closed := testenv.CloseConnections(t, c.Config().Name); closed == 0 {
		t.Fatalf("no connection of %s found to close", c.Config().Name)
	}
	testenv.WaitFor(t, 60*time.Second, "the consumer to reconnect", func() bool {
		return c.Stats().Reconnects >= 1 && c.Health().Ready
	})
	for _, line := range strings.Split(log.String(), "\n") {
		if strings.Contains(line, "level=WARN") && (strings.Contains(line, "max_message_size") || strings.Contains(line, "GiB")) {
			t.Errorf("a stock broker's consumer warned about its memory: %s", line)
		}
	}
	if n := strings.Count(log.String(), "the broker accepts messages larger than MaxBodyBytes"); n != 1 {
		t.Errorf("the note on the broker's limit was logged %d times over two sessions, want once", n)
	}
	if !log.has("worst_case_bytes_at_default=") || !log.has("rabbitmq_version=") {
		t.Errorf("the log does not state the worst case at the broker's default:\n%s", log)
	}
	h := c.Health()
	if h.WorstCaseBytes == 0 || h.WorstCaseBytesAtMost <= h.WorstCaseBytes {
		t.Errorf("Health worst case %d, at most %d: want the version default's figure below the maximum's", h.WorstCaseBytes, h.WorstCaseBytesAtMost)
	}
}

// A limit the operator stated above MaxBodyBytes, without a budget, is
// warned about: producers may fill memory with messages the consumer can
// only dead-letter, and the operator can act on it.
func TestStatedLimitAboveMaxBodyBytesIsWarned(t *testing.T) {
	t.Parallel()
	var log *logLines
	c := newConsumer(t, func(cfg *consumer.Config) {
		cfg.BrokerMaxMessageSize = 128 << 20
		log = captureLog(t, cfg)
	})
	c.HandleFunc("", func(context.Context, *warren.Message) error { return nil })
	start(t, c)
	if !log.has("level=WARN msg=\"the consumer may hold more than 1 GiB of message bodies: the broker's max_message_size (134217728) is above MaxBodyBytes") {
		t.Errorf("no warning of a stated limit above MaxBodyBytes:\n%s", log)
	}
}

// A MaxBodyBytes of "no limit" (math.MaxInt) starts: no probe of
// MaxBodyBytes+1 bytes is sent (it wrapped, and crashed Run), and the
// consumer plans with RabbitMQ's maximum.
func TestUnlimitedMaxBodyBytesStarts(t *testing.T) {
	t.Parallel()
	var log *logLines
	c := newConsumer(t, func(cfg *consumer.Config) {
		cfg.MaxBodyBytes = math.MaxInt
		log = captureLog(t, cfg)
	})
	c.HandleFunc("", func(context.Context, *warren.Message) error { return nil })
	start(t, c)
	if !log.has("max_message_size_source=assumed") || !log.has("worst_case_bytes_at_most=") {
		t.Errorf("the start-up log does not state the plan at RabbitMQ's maximum:\n%s", log)
	}
}

// The probe reads the exact limit of a real broker, set on a private node
// (channels read it when they open), and against the shared broker's
// default learns only that the limit is larger than the probe.
func testProbeReadsTheBrokersLimit(t *testing.T) {
	node := localrabbit.Shared(t)
	node.SetMaxMessageSize(t, 262144)
	ctx := context.Background()
	limit, _, err := consumer.ProbeBrokerLimit(ctx, node.URL(), t.Name(), 1<<20+1)
	if err != nil || limit != 262144 {
		t.Errorf("probe = %d, %v; want limit 262144", limit, err)
	}

	limit, version, err := consumer.ProbeBrokerLimit(ctx, testenv.AMQPURL(t), t.Name(), 1<<20+1)
	if err != nil || limit != 0 {
		t.Errorf("probe of the shared broker = %d, %v; want it accepted (limit 0)", limit, err)
	}
	if consumer.VersionDefaultLimit(version) == 0 {
		t.Errorf("the broker's version %q is not one whose default max_message_size is known", version)
	}
}
