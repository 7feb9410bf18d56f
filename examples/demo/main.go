// Command demo runs the whole warren pipeline on the local services for
// about fifteen seconds and shows what happens to every event: it wires the
// examples (examples/pipeline) with a workload whose outcome it knows and
// checks its own summary.
//
//	scripts/services.sh && go run ./examples/demo
//	go run ./examples/demo -items 100 -verbose
//
// It lives with the examples, not in the warren command, so the binary an
// operator ships links no example code (docs/adr/002-demo-outside-examples.md).
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"golang.org/x/term"

	"github.com/warrenmq/warren/consumer"
	"github.com/warrenmq/warren/dlq"
	"github.com/warrenmq/warren/examples/pipeline"
	"github.com/warrenmq/warren/internal/amqpx"
	"github.com/warrenmq/warren/internal/redact"
)

// demoPrefix names everything the demo creates; a new run first removes
// what the last one left, and leaves its own dead letters for inspection.
const demoPrefix = "warren_demo"

const demoUsage = `Usage: go run ./examples/demo [flags]

Runs the whole warren pipeline on the local services for about fifteen
seconds and shows what happens to every event:

  application transactions write work items and their events (outbox)
    → relay → fanout exchange "warren_demo.events"
    → webhook consumer  → a local receiver that checks signatures
    → automation consumer → a rule ("done work is not urgent") that writes
      its own follow-up events through the outbox

The workload includes a poison event the receiver refuses, deliveries the
receiver fails once, events from a system import that the automation must
skip, and redelivered copies that both consumers must recognise. The demo
ends with a summary it has checked against what happened, and leaves the
poison event in the webhook's dead-letter queue for 'warren dlq'.

Needs PostgreSQL, Redis and RabbitMQ: run scripts/services.sh first.

Flags:
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Stdout, os.Stderr, os.Getenv, os.Args[1:]))
}

type demoOptions struct {
	amqpURL, databaseURL, redisURL string
	prefix                         string
	items                          int
	every                          time.Duration
	verbose                        bool
}

// run is the command: exit status 0 on success, 1 when the demo fails or
// its checks do not add up, 2 on a wrong command line.
func run(ctx context.Context, stdout, stderr io.Writer, getenv func(string) string, args []string) int {
	var o demoOptions
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), demoUsage)
		fs.PrintDefaults()
	}
	fs.StringVar(&o.amqpURL, "amqp-url", "", "the broker; default $AMQP_URL, else "+redact.URL(amqpx.DefaultURL))
	fs.StringVar(&o.databaseURL, "database-url", "", "Postgres; default $DATABASE_URL, else "+defaultDatabaseURL)
	fs.StringVar(&o.redisURL, "redis-url", "", "Redis; default $REDIS_URL, else "+defaultRedisURL)
	fs.IntVar(&o.items, "items", 30, "work items a user moves to done (each makes 3 events and 1 follow-up)")
	fs.DurationVar(&o.every, "every", 100*time.Millisecond, "pause between application transactions")
	fs.BoolVar(&o.verbose, "verbose", false, "show the services' own log lines")
	fs.StringVar(&o.prefix, "prefix", demoPrefix, "names everything the demo creates (queues, exchange, tables, keys)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	usage := func(format string, args ...any) int {
		fmt.Fprintf(stderr, "demo: "+format+"\n", args...)
		return 2
	}
	switch {
	case fs.NArg() > 0:
		return usage("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	case !demoPrefixRE.MatchString(o.prefix):
		return usage("-prefix must be a lower-case SQL identifier of at most 30 bytes, like %s", demoPrefix)
	case o.items < 1 || o.items > 10000:
		return usage("-items must be between 1 and 10000")
	case o.every <= 0:
		return usage("-every must be positive")
	}
	level := slog.LevelError + 4 // the demo's own lines say what happened
	if o.verbose {
		level = slog.LevelInfo
	}
	cfg := pipeline.Config{
		AMQPURL:     cmp.Or(o.amqpURL, getenv("AMQP_URL"), amqpx.DefaultURL),
		DatabaseURL: cmp.Or(o.databaseURL, getenv("DATABASE_URL"), defaultDatabaseURL),
		RedisURL:    cmp.Or(o.redisURL, getenv("REDIS_URL"), defaultRedisURL),
		Names:       pipeline.NamesWithPrefix(o.prefix),
		Answer:      pipeline.FlakyAnswer,
		Logger:      slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})),
	}
	self, _ := os.Executable()
	hint := warrenHint(o.amqpURL, self, exec.LookPath, fileExists)
	hint.withOutbox(cfg.DatabaseURL, cfg.Names.Outbox)
	err := demo(ctx, stdout, cfg, hint, pipeline.Workload{
		UserItems: o.items, ImportedItems: max(1, o.items/6), Poison: true, Every: o.every,
	})
	if err != nil {
		fmt.Fprintf(stderr, "demo: %v\n", redact.Error(err, cfg.AMQPURL, cfg.DatabaseURL, cfg.RedisURL))
		return 1
	}
	return 0
}

const defaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

const defaultRedisURL = "redis://127.0.0.1:6379/0"

var demoPrefixRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,29}$`)

// hint is how the closing lines tell the user to run warren: the command
// (what runs it from where they are) and the flags it needs to reach the
// broker the demo used.
type hint struct {
	command, flags string
	// outbox is what the console needs to show the demo's outbox: the
	// database (password masked) and the table.
	outbox string
	masked bool // flags or outbox hold a URL whose password was masked
}

// warrenHint builds the hint; self is the demo's own executable. The
// command is the way the user runs things here: a warren built beside the
// demo (bin/demo, bin/warren), 'go run ./cmd/warren' when the demo itself
// came from 'go run' in a checkout, warren when it is on PATH, else
// 'go run' from a checkout or of the module path. An -amqp-url given to
// the demo is passed on as --amqp-url, its password masked (the hint is
// printed, and may be pasted into a ticket); AMQP_URL from the environment
// reaches warren by itself.
func warrenHint(amqpURL, self string, lookPath func(string) (string, error), exists func(string) bool) hint {
	goRun := strings.Contains(filepath.ToSlash(self), "/go-build")
	checkout := exists(filepath.Join("cmd", "warren", "main.go"))
	sibling := filepath.Join(filepath.Dir(self), "warren")
	_, pathErr := lookPath("warren")
	h := hint{command: "go run github.com/warrenmq/warren/cmd/warren@latest"}
	switch {
	case self != "" && !goRun && exists(sibling):
		h.command = sibling
		if wd, err := os.Getwd(); err == nil {
			if rel, err := filepath.Rel(wd, sibling); err == nil && !strings.HasPrefix(rel, "..") {
				h.command = "./" + rel
			}
		}
	case goRun && checkout:
		h.command = "go run ./cmd/warren"
	case pathErr == nil:
		h.command = "warren"
	case checkout:
		h.command = "go run ./cmd/warren"
	}
	if amqpURL != "" {
		masked := amqpx.RedactURLs(amqpURL)
		h.flags, h.masked = " --amqp-url "+shellQuote(masked), masked != amqpURL
	}
	return h
}

// withOutbox adds the console's flags for the demo's outbox table in the
// database at dbURL, its password masked.
func (h *hint) withOutbox(dbURL, table string) {
	masked := redact.URL(dbURL)
	h.outbox = " --database-url " + shellQuote(masked) + " --table " + table
	h.masked = h.masked || masked != dbURL
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if regexp.MustCompile(`^[A-Za-z0-9@%_+=:,./-]+$`).MatchString(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func fileExists(name string) bool {
	_, err := os.Stat(name)
	return err == nil
}

func demo(ctx context.Context, out io.Writer, cfg pipeline.Config, h hint, w pipeline.Workload) error {
	begin := time.Now()
	fmt.Fprintf(out, "Clearing what an earlier demo left (%s*)…\n", strings.TrimSuffix(cfg.Names.Exchange, ".events"))
	if err := pipeline.Destroy(ctx, cfg); err != nil {
		return fmt.Errorf("%w\nAre the services up? Run scripts/services.sh", err)
	}
	fmt.Fprintln(out, "Starting the receiver, the relay and both consumers…")
	p, err := pipeline.Start(ctx, cfg)
	if err != nil {
		return fmt.Errorf("%w\nAre the services up? Run scripts/services.sh", err)
	}
	stopped := false
	defer func() {
		if !stopped {
			p.Stop()
		}
	}()

	progress := newDemoProgress(out, isTerminal(out))
	ticker := time.NewTicker(500 * time.Millisecond)
	defer ticker.Stop()
	type produced struct {
		exp pipeline.Expect
		err error
	}
	done := make(chan produced, 1)
	go func() {
		exp, err := p.Produce(ctx, w)
		done <- produced{exp, err}
	}()
	fmt.Fprintln(out, "Writing events: users move work items to done, an import marks some done, one poison pill…")
	var exp pipeline.Expect
	for waiting := true; waiting; {
		select {
		case r := <-done:
			if r.err != nil {
				return r.err
			}
			exp, waiting = r.exp, false
		case <-ticker.C:
			progress.show(ctx, p)
		case <-ctx.Done():
			return ctx.Err()
		}
	}

	settled := func() bool {
		byEvent, _, err := p.Automation.Runs(ctx)
		return err == nil && len(p.Receiver.Accepted()) >= exp.Delivered && len(byEvent) >= exp.RuleRuns &&
			p.Webhook.Stats().DeadLettered >= uint64(exp.DeadLettered)
	}
	if err := progress.until(ctx, p, ticker, 40*time.Second, settled); err != nil {
		return fmt.Errorf("the pipeline did not settle: %w", err)
	}
	copies := pipeline.HandledByBoth(exp.Events, 5)
	fmt.Fprintf(progress.lineEnd(), "Redelivering %d events both consumers already handled…\n", len(copies))
	before := p.Webhook.Stats().Duplicates + p.Automation.Stats().Duplicates
	if err := p.Redeliver(ctx, copies); err != nil {
		return err
	}
	if err := progress.until(ctx, p, ticker, 20*time.Second, func() bool {
		return p.Webhook.Stats().Duplicates+p.Automation.Stats().Duplicates-before >= uint64(2*len(copies))
	}); err != nil {
		return fmt.Errorf("the redelivered copies were not recognised: %w", err)
	}
	progress.show(ctx, p)
	progress.lineEnd()

	sum, err := summarize(ctx, p)
	if err != nil {
		return err
	}
	stopped = true
	if err := p.Stop(); err != nil {
		return fmt.Errorf("stopping the pipeline: %w", err)
	}
	return demoSummary(out, sum, exp, len(copies), p.Webhook.Config().Name, h, time.Since(begin))
}

// demoResult is what the pipeline did, read once everything settled.
type demoResult struct {
	accepted  map[string]int
	forged    int
	byEvent   map[string]int
	followUps []string
	web, auto consumer.Stats
}

func summarize(ctx context.Context, p *pipeline.Pipeline) (demoResult, error) {
	r := demoResult{accepted: p.Receiver.Accepted(), forged: p.Receiver.Forged()}
	var err error
	r.byEvent, r.followUps, err = p.Automation.Runs(ctx)
	r.web, r.auto = p.Stats()
	return r, err
}

// demoSummary prints what happened, checking each line against what the
// workload must lead to, and fails if anything does not add up.
func demoSummary(out io.Writer, r demoResult, exp pipeline.Expect, copies int, webhookQueue string, h hint, took time.Duration) error {
	twice := 0
	for _, n := range r.accepted {
		if n != 1 {
			twice++
		}
	}
	runsTwice := 0
	for _, n := range r.byEvent {
		if n != 1 {
			runsTwice++
		}
	}
	var failures []string
	check := func(ok bool, format string, args ...any) string {
		if ok {
			return "✓"
		}
		failures = append(failures, fmt.Sprintf(format, args...))
		return "✗"
	}
	row := func(mark, what string, n any, note string) {
		fmt.Fprintf(out, "  %s %-36s %5v  %s\n", mark, what, n, note)
	}
	web, auto := r.web, r.auto
	fmt.Fprintf(out, "\nDone in %.1fs. What happened:\n\n", took.Seconds())
	row(" ", "events written through the outbox", exp.Written+len(r.followUps),
		fmt.Sprintf("%d by the application, %d by the automation rule", exp.Written, len(r.followUps)))
	row(check(len(r.accepted) == exp.Delivered && twice == 0 && r.forged == 0,
		"receiver accepted %d distinct events (%d more than once, %d forged), want %d", len(r.accepted), twice, r.forged, exp.Delivered),
		"delivered to the webhook receiver", len(r.accepted), "each exactly once, every signature valid")
	row(" ", "retried after a failure", web.Retried+auto.Retried,
		fmt.Sprintf("webhook %d (receiver answered 503), automation %d; all then succeeded", web.Retried, auto.Retried))
	row(check(len(r.byEvent) == exp.RuleRuns && runsTwice == 0, "rule ran for %d events (%d more than once), want %d", len(r.byEvent), runsTwice, exp.RuleRuns),
		"automation rule runs", len(r.byEvent), "each exactly once, in the event's own transaction")
	row(check(len(r.followUps) == exp.FollowUps, "%d follow-up events, want %d", len(r.followUps), exp.FollowUps),
		"skipped by automation", auto.Skipped, "SYSTEM.* events (its own follow-ups, the import) and no-op changes")
	row(check(web.Duplicates == uint64(copies) && auto.Duplicates == uint64(copies),
		"duplicates webhook %d automation %d, want %d each", web.Duplicates, auto.Duplicates, copies),
		"redelivered copies recognised", web.Duplicates+auto.Duplicates, fmt.Sprintf("%d copies × 2 consumers, none handled twice", copies))
	row(check(web.DeadLettered == uint64(exp.DeadLettered) && auto.DeadLettered == 0,
		"dead letters webhook %d automation %d, want %d and 0", web.DeadLettered, auto.DeadLettered, exp.DeadLettered),
		"dead-lettered", web.DeadLettered+auto.DeadLettered, "the poison pill, refused by the receiver with 400")
	fmt.Fprintln(out)
	if len(failures) > 0 {
		return fmt.Errorf("the demo's checks failed: %s", strings.Join(failures, "; "))
	}
	fmt.Fprintln(out, "Nothing lost, nothing applied twice.")
	fmt.Fprintf(out, "\nThe poison event is waiting in %s. Look at it:\n\n", dlq.QueueName(webhookQueue))
	fmt.Fprintf(out, "  %s dlq show --queue %s%s\n", h.command, webhookQueue, h.flags)
	fmt.Fprintf(out, "  %s dlq replay --queue %s --dry-run%s\n", h.command, webhookQueue, h.flags)
	fmt.Fprint(out, "\nOr in the web console, at http://127.0.0.1:8089/ (its default address):\n\n")
	fmt.Fprintf(out, "  %s console%s%s\n", h.command, h.flags, h.outbox)
	if h.masked {
		fmt.Fprintln(out, "\n(passwords masked: put yours back in the URLs, or export AMQP_URL and DATABASE_URL and leave the flags out)")
	}
	return nil
}

// demoProgress prints one line of running totals: rewritten in place on a
// terminal, one line a second otherwise.
type demoProgress struct {
	out      io.Writer
	terminal bool
	last     time.Time
	drawn    bool
}

func newDemoProgress(out io.Writer, terminal bool) *demoProgress {
	return &demoProgress{out: out, terminal: terminal}
}

func (d *demoProgress) show(ctx context.Context, p *pipeline.Pipeline) {
	if !d.terminal && time.Since(d.last) < time.Second {
		return
	}
	d.last = time.Now()
	stats, err := p.App.Outbox.Stats(ctx, p.Pool)
	if err != nil {
		return
	}
	_, followUps, _ := p.Automation.Runs(ctx)
	web, auto := p.Stats()
	line := fmt.Sprintf("pending in outbox %3d · delivered %4d · retried %3d · deduplicated %3d · dead-lettered %d · rule runs %3d",
		stats.Pending, len(p.Receiver.Accepted()), web.Retried+auto.Retried, web.Duplicates+auto.Duplicates,
		web.DeadLettered+auto.DeadLettered, len(followUps))
	if d.terminal {
		fmt.Fprintf(d.out, "\r\033[K  %s", line)
		d.drawn = true
		return
	}
	fmt.Fprintf(d.out, "  %s\n", line)
}

// lineEnd finishes a progress line drawn in place, so the next text starts
// on a line of its own.
func (d *demoProgress) lineEnd() io.Writer {
	if d.drawn {
		fmt.Fprintln(d.out)
		d.drawn = false
	}
	return d.out
}

// until shows progress until cond holds or timeout passes.
func (d *demoProgress) until(ctx context.Context, p *pipeline.Pipeline, ticker *time.Ticker, timeout time.Duration, cond func() bool) error {
	deadline := time.After(timeout)
	for !cond() {
		select {
		case <-ticker.C:
			d.show(ctx, p)
		case <-deadline:
			if err := p.Err(); err != nil {
				return err
			}
			return fmt.Errorf("not done after %v", timeout)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// isTerminal reports whether w is a terminal, where progress is redrawn in
// place.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
