package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/consumer"
	"github.com/warrenmq/warren/internal/amqpx"
	"github.com/warrenmq/warren/outbox"
	"github.com/warrenmq/warren/relay"
)

// childFlag, as the first argument, makes the bench binary a subprocess of
// the memory scenario: it runs one warren side over a prepared backlog and
// prints what it measured of its own memory as one line of JSON. A process
// of its own is the only way to measure one side's resident memory, free
// of the harness and of the other side.
const childFlag = "-child"

// rssSampleEvery is how often the child reads its resident set size.
const rssSampleEvery = 50 * time.Millisecond

func memoryScenario() scenario {
	return scenario{
		name: "memory",
		about: "Peak resident set size (VmHWM) of a process that runs one warren side over a backlog prepared by the harness: a BaseConsumer " +
			"at its defaults with a no-op handler draining a queue, and `relay.Run` at its defaults draining an outbox table. " +
			"Growth is the resident set at the end of the run minus at its middle (sampled every 50 ms): a leak shows there, a warm-up does not; " +
			"\"flat\" is taken to mean at most 5 MB of growth. There is no raw baseline; the targets are absolute.",
		metrics: []metric{
			{name: "peak RSS MB", lowerBetter: true, target: target{bound: 50}},
			{name: "growth 2nd half MB", lowerBetter: true, target: target{bound: 5}},
		},
		size:   func(e *env) string { return fmt.Sprintf("%d messages", e.rssMessages) },
		rounds: 1,
		variants: []variant{
			{name: "warren: BaseConsumer", run: memoryOf("consumer", prepareQueue),
				why: "the consumer holds up to Channels × Prefetch deliveries with their bodies, and Go's heap grows to twice the live set before it collects."},
			{name: "warren: relay.Run", run: memoryOf("relay", prepareOutbox),
				why: "the relay holds Workers × BatchSize decoded rows and their encoded messages, and Go's heap grows to twice the live set before it collects."},
		},
	}
}

// childReport is what a child prints.
type childReport struct {
	PeakKB     int64   `json:"peak_kb"`
	SamplesKB  []int64 `json:"samples_kb"`
	Messages   int     `json:"messages"`
	ElapsedSec float64 `json:"elapsed_sec"`
}

// prepare readies a backlog of e.rssMessages for a child and returns the
// child's arguments and a cleanup.
type prepare func(ctx context.Context, e *env) (args []string, cleanup func(), err error)

// memoryOf prepares a backlog, runs the child that drains it and returns
// its peak RSS and second-half growth in megabytes.
func memoryOf(side string, prep prepare) func(ctx context.Context, e *env) (figures, error) {
	return func(ctx context.Context, e *env) (figures, error) {
		args, cleanup, err := prep(ctx, e)
		if err != nil {
			return nil, err
		}
		defer cleanup()
		self, err := os.Executable()
		if err != nil {
			return nil, err
		}
		cmd := exec.CommandContext(ctx, self, append([]string{childFlag, side, "-messages", strconv.Itoa(e.rssMessages)}, args...)...)
		cmd.Env = append(os.Environ(), "AMQP_URL="+e.amqpURL, "DATABASE_URL="+e.databaseURL)
		cmd.Stderr = os.Stderr
		out, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("%s child: %w", side, err)
		}
		var rep childReport
		if err := json.Unmarshal(bytes.TrimSpace(out), &rep); err != nil {
			return nil, fmt.Errorf("%s child printed %q: %w", side, out, err)
		}
		if len(rep.SamplesKB) < 2 {
			return nil, fmt.Errorf("%s child took %d RSS samples; the run was too short to judge growth", side, len(rep.SamplesKB))
		}
		mid, last := rep.SamplesKB[len(rep.SamplesKB)/2], rep.SamplesKB[len(rep.SamplesKB)-1]
		fmt.Fprintf(os.Stderr, "   %s: %d messages in %.1fs; RSS samples (MB) %s\n", side, rep.Messages, rep.ElapsedSec, sampleSummary(rep.SamplesKB))
		return figures{float64(rep.PeakKB) / 1024, float64(last-mid) / 1024}, nil
	}
}

// sampleSummary shows the RSS at each tenth of the run.
func sampleSummary(kb []int64) string {
	var parts []string
	for i := 0; i <= 10; i++ {
		parts = append(parts, fmt.Sprintf("%.1f", float64(kb[min(i*(len(kb)-1)/10, len(kb)-1)])/1024))
	}
	return strings.Join(parts, " ")
}

// prepareQueue fills a consumer's queue, declared as the consumer would.
func prepareQueue(ctx context.Context, e *env) ([]string, func(), error) {
	name := uniqueName("rss")
	cfg := consumer.Config{URL: e.amqpURL, Name: name, Exchange: name + ".ex", Logger: discardLogger}
	if err := declareOnly(ctx, cfg); err != nil {
		return nil, nil, err
	}
	conn, err := amqpx.Dial(ctx, e.amqpURL, amqpx.DialOptions{Name: "bench fill"})
	if err != nil {
		return nil, nil, err
	}
	cleanup := func() {
		if ch, err := conn.Channel(); err == nil {
			for _, q := range consumer.TopologyFor(cfg).Queues() {
				ch.QueueDelete(q, false, false, false)
			}
			ch.ExchangeDelete(cfg.Exchange, false, false)
			ch.ExchangeDelete(consumer.TopologyFor(cfg).DLX, false, false)
		}
		conn.Close()
	}
	if err := fill(ctx, e, conn, "", name, e.rssMessages); err != nil {
		cleanup()
		return nil, nil, err
	}
	return []string{"-name", name}, cleanup, nil
}

// prepareOutbox fills an outbox table.
func prepareOutbox(ctx context.Context, e *env) ([]string, func(), error) {
	ob, err := filledOutbox(ctx, e, e.rssMessages)
	if err != nil {
		return nil, nil, err
	}
	return []string{"-name", ob.outbox.Name(), "-exchange", ob.exchange}, ob.close, nil
}

// runChild is the subprocess: it drains the backlog side's way and prints
// a childReport.
func runChild(side string, args []string) error {
	fs := flag.NewFlagSet("child", flag.ContinueOnError)
	messages := fs.Int("messages", 0, "backlog size")
	name := fs.String("name", "", "consumer or outbox table name")
	exchange := fs.String("exchange", "", "the relay's exchange")
	if err := fs.Parse(args); err != nil {
		return err
	}
	e := &env{amqpURL: envOr("AMQP_URL", ""), databaseURL: envOr("DATABASE_URL", ""), messages: *messages}
	ctx := context.Background()

	var done atomic.Int64
	stopSampling := make(chan struct{})
	var samples []int64
	var sampler sync.WaitGroup
	sampler.Go(func() {
		tick := time.NewTicker(rssSampleEvery)
		defer tick.Stop()
		for {
			select {
			case <-stopSampling:
				return
			case <-tick.C:
				samples = append(samples, procStatusKB("VmRSS"))
			}
		}
	})

	begin := time.Now()
	var err error
	switch side {
	case "consumer":
		err = childConsume(ctx, e, *name, &done)
	case "relay":
		err = childRelay(ctx, e, *name, *exchange)
	default:
		err = fmt.Errorf("unknown side %q", side)
	}
	elapsed := time.Since(begin)
	close(stopSampling)
	sampler.Wait()
	if err != nil {
		return err
	}
	samples = append(samples, procStatusKB("VmRSS"))
	return json.NewEncoder(os.Stdout).Encode(childReport{PeakKB: procStatusKB("VmHWM"), SamplesKB: samples, Messages: e.messages, ElapsedSec: elapsed.Seconds()})
}

func childConsume(ctx context.Context, e *env, name string, handled *atomic.Int64) error {
	c, err := consumer.New(consumer.Config{URL: e.amqpURL, Name: name, Exchange: name + ".ex", Logger: discardLogger})
	if err != nil {
		return err
	}
	all := make(chan struct{})
	c.HandleFunc("", func(context.Context, *warren.Message) error {
		if handled.Add(1) == int64(e.messages) {
			close(all)
		}
		return nil
	})
	runCtx, stop := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- c.Run(runCtx) }()
	select {
	case <-all:
	case err := <-errc:
		stop()
		return fmt.Errorf("consumer stopped: %v", err)
	}
	stop()
	return <-errc
}

func childRelay(ctx context.Context, e *env, table, exchange string) error {
	pool, err := pgPool(ctx, e)
	if err != nil {
		return err
	}
	defer pool.Close()
	ob := &outboxBench{pool: pool}
	if ob.outbox, err = outbox.New(table); err != nil {
		return err
	}
	r, err := relay.New(relay.Config{Pool: pool, AMQPURL: e.amqpURL, Exchange: exchange, Table: table, Name: "warren-bench-rss", Logger: discardLogger})
	if err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- r.Run(runCtx) }()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for more := true; more; {
		select {
		case err := <-errc:
			return fmt.Errorf("relay stopped: %v", err)
		case <-tick.C:
		}
		if more, err = ob.pending(ctx); err != nil {
			return err
		}
	}
	stop()
	return <-errc
}

// procStatusKB reads a field of /proc/self/status, in kB (0 if absent).
func procStatusKB(field string) int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), field+":"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb
		}
	}
	return 0
}
