package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/dlq"
	"github.com/warrenmq/warren/dlqtool"
	"github.com/warrenmq/warren/internal/amqpx"
	"github.com/warrenmq/warren/internal/redact"
)

// dlqSub is one `warren dlq` subcommand.
type dlqSub = subcommand[dlqOptions, *dlqCall]

// dlqVerbs are `warren dlq`'s subcommands: each names the dead-letter queue.
var dlqVerbs = &subcommands[dlqOptions, *dlqCall]{
	command: "dlq", synopsis: "--queue NAME", common: func(fs *flagSet, o *dlqOptions) { o.commonFlags(fs) }, usage: printDLQUsage, verbs: dlqSubs,
}

var dlqSubs = []dlqSub{
	{
		name: "ls", summary: "list dead messages, head of the queue first",
		about: "List dead messages with what killed them, head of the queue first. The queue is left as it was.\n\n" +
			"When --limit cuts the list, the output says so (showing N of M). Columns are cut to fit only on a terminal; piped, every text is whole. " +
			"--json prints one object: {\"queue\": the DLQ, \"total\": how many messages match the filters, \"messages\": [the first --limit of them, each as 'warren dlq export' writes it]}; total > len(messages) when --limit cut the list.",
		examples: []string{
			"warren dlq ls --queue webhook",
			"warren dlq ls --queue webhook --class permanent --newer-than 1h --limit 0",
			"warren dlq ls --queue webhook --limit 0 --json | jq -r '.messages[].event_id'",
		},
		flags: func(fs *flagSet, o *dlqOptions) { o.filterFlags(fs); o.limitFlag(fs, 20); o.jsonFlag(fs) },
		run:   runDLQList,
	},
	{
		name: "show", args: "[EVENT_ID...]", summary: "print dead messages in full: metadata, properties, headers, body",
		about: "Print dead messages in full: the decoded failure record (error, class, attempts, failure times, origin, RabbitMQ's x-death), every property and header, and the body. With EVENT_IDs, shows those events; otherwise the first --limit messages that match the filters, saying so (showing N of M) when more match. The queue is left as it was. --json prints the object 'warren dlq ls --json' prints: {\"queue\", \"total\", \"messages\"}.",
		examples: []string{
			"warren dlq show --queue webhook 0b7c5e2a-9f7d-4c1e-8a53-2f0f4f1c9d11",
			"warren dlq show --queue webhook --class undecodable --limit 3",
		},
		flags: func(fs *flagSet, o *dlqOptions) { o.filterFlags(fs); o.limitFlag(fs, 1); o.jsonFlag(fs) },
		run:   runDLQShow,
	},
	{
		name: "stats", summary: "count dead messages by error class, event type and error signature",
		about: "Count the dead messages by error class, by event type and by error signature, largest group first: what broke, and how much. The queue is left as it was.\n\n" +
			"An error signature is the class and the error text with what varies from one message to the next (ids, UUIDs, numbers, hosts, URLs, durations, quoted values; not HTTP status codes) replaced by placeholders, so one failure met by 4,000 different work items is one row, shown with one of its errors as an example. --json gives each group's signature as key and an example error as example.\n\n" +
			"Without --queue it counts every warren dead-letter queue of the vhost (every queue named NAME.dlq), found through RabbitMQ's management API (the rabbitmq_management plugin, which scripts/services.sh enables): a table of every DLQ's depth, then the groups of each one that holds messages. --json then prints {\"total\": N, \"queues\": [the stats of each DLQ]}.",
		examples: []string{
			"warren dlq stats --queue webhook",
			"warren dlq stats --queue webhook --by error --top 0",
			"warren dlq stats --queue webhook --type workitem. --json",
			"warren dlq stats    # every consumer's dead-letter queue on the broker",
		},
		flags: func(fs *flagSet, o *dlqOptions) {
			o.filterFlags(fs)
			fs.String(&o.by, "by", "LIST", "which groupings to print: class, type, error (by signature), field (by the contract and field that failed; comma-separated)", "class,type,error,field")
			fs.Int(&o.top, "top", "N", "rows per grouping; 0 prints all", 10)
			fs.String(&o.managementURL, "management-url", "URL", "without --queue: RabbitMQ's management API, which lists the queues; default http://HOST:15672/ of the broker, with its user and password", "")
			o.jsonFlag(fs)
		},
		run: runDLQStats,
	},
	{
		name: "replay", summary: "send dead messages back to the queue they failed in", changes: true,
		about: "Send dead messages back to the queue the dead-letter queue belongs to (webhook for webhook.dlq), or to --to QUEUE, through the default exchange: only that consumer sees them again, never the other consumers of the event's exchange. The origin queue a message's headers name does not choose where it goes (a producer can forge headers); messages whose headers name another queue are counted in the output. Each message is published with publisher confirms and removed from the dead-letter queue only once the broker has the copy, in queue order. The copy's attempts, error and class are reset, so it gets a full set of retries, and its replay count (x-warren-replays) goes up by one.\n\nCtrl-C stops after the message in flight; every message is then in the dead-letter queue or the queue it was replayed to.",
		examples: []string{
			"warren dlq replay --queue webhook --type workitem. --limit 100",
			"warren dlq replay --queue webhook --error 'connection refused' --rate 20 --yes",
			"warren dlq replay --queue webhook --class expired --dry-run",
			"warren dlq replay --queue webhook --id 0b7c5e2a-9f7d-4c1e-8a53-2f0f4f1c9d11 --to webhook-debug",
		},
		flags: func(fs *flagSet, o *dlqOptions) {
			o.filterFlags(fs)
			o.limitFlag(fs, 0)
			fs.Float(&o.rate, "rate", "N", "replay at most N messages a second; 0 is as fast as the broker confirms", 0)
			fs.String(&o.to, "to", "QUEUE", "send every message to QUEUE instead of the queue the dead-letter queue belongs to", "")
			o.changeFlags(fs)
		},
		run: runDLQReplay,
	},
	{
		name: "purge", summary: "delete dead messages", changes: true,
		about: "Delete the dead messages that match the filters, leaving the others in place and in order. Deleted messages are gone: keep a copy with --archive.\n\n" +
			"With --archive FILE, every message to delete is first written to FILE, a new file, as 'warren dlq export' writes it, and FILE is synced to disk; only then are the messages deleted. If writing or syncing fails, or the purge is interrupted before that, nothing is deleted. 'warren dlq import FILE' puts them back. Until they are deleted the messages are held by the command, as a filtered read holds the queue.",
		examples: []string{
			"warren dlq purge --queue webhook --class undecodable --older-than 7d --dry-run",
			"warren dlq purge --queue webhook --class undecodable --archive undecodable.jsonl --yes",
		},
		flags: func(fs *flagSet, o *dlqOptions) {
			o.filterFlags(fs)
			o.limitFlag(fs, 0)
			fs.String(&o.archive, "archive", "FILE", "first write the messages to delete to FILE (a new file) as export does, and sync it; delete nothing if that fails (--dry-run writes no file)", "")
			o.changeFlags(fs)
		},
		run: runDLQPurge,
	},
	{
		name: "export", summary: "write dead messages to a JSON Lines file",
		about: "Write dead messages as JSON Lines, one message per line: body, every property, and headers with their AMQP types, plus the decoded failure record for reading. 'warren dlq import' publishes such a file back exactly (into a queue other than a DLQ, without RabbitMQ's death headers). The queue is left as it was.",
		examples: []string{
			"warren dlq export --queue webhook --output webhook-dead.jsonl",
			"warren dlq export --queue webhook --type workitem. | jq -c '{id: .event_id, error: .metadata.error}'",
		},
		flags: func(fs *flagSet, o *dlqOptions) {
			o.filterFlags(fs)
			o.limitFlag(fs, 0)
			fs.String(&o.output, "output", "FILE", "write to FILE instead of standard output", "")
		},
		run: runDLQExport,
	},
	{
		name: "import", args: "FILE", summary: "publish messages from a JSON Lines file into a queue", changes: true,
		about: "Publish the messages of a JSON Lines file written by 'warren dlq export' into the dead-letter queue (or --to QUEUE), in order and exactly as exported, each with publisher confirms. Into a queue that is not a dead-letter queue (its name does not end in .dlq), each message goes as 'warren dlq replay' sends it: its failure record reset (error, class, attempts, failure times) so the consumer gives it a full set of attempts, its replay count raised, and RabbitMQ's death headers (x-death, x-first-death-*, x-last-death-*) left out, or the broker would drop the message as a dead-letter cycle on its first retry; what they said is kept in x-warren-first-death-*. The whole file is checked before anything is published, so an import does not stop part way on a message that cannot go: without --to, a message whose headers name an origin queue other than the one the dead-letter queue belongs to is refused (name the target with --to to import it anyway); so is one the client cannot write (a property or header name over 255 bytes, headers larger than a frame), one a consumer's client could not read back (headers nested more than 32 deep or a table of more than 8192 entries), one with a CC or BCC header (the broker would copy it to the queues those name), and one the broker refuses (each message is sent to it under a routing key no queue has, which it checks, for max_message_size, user_id, expiration and the rest, and returns: nothing is stored). It is read three times, first for its longest line, then to check every line, then to publish one message at a time, so memory holds one line (about twice its size), never the file. FILE '-' reads standard input (then --yes is required). Standard input, a FIFO or a process substitution such as <(warren dlq export ...) cannot be read twice, so it is copied first to a temporary file in $TMPDIR, at most --max-spool-bytes, whose name is removed at once; a regular file is read where it is. Lines are at most 16 MiB unless --max-line-bytes says otherwise: enough for a text body of nearly 16 MiB or a binary one of 12 MiB (base64 adds a third).\n\n" +
			"Importing the same file twice would double its messages: each imported message carries the import's id, a hash of the file, in the header x-warren-import-id, and an import into a dead-letter queue is refused while that queue still holds messages with its id (it is read first, without removing anything). An import --to a consumer's queue is not checked (it says so): reading the queue would hold its backlog from the consumer, which takes an import's messages as they come anyway; there the consumer's idempotency keeps a second copy from being applied twice. --allow-duplicates imports anyway.",
		examples: []string{
			"warren dlq import --queue webhook webhook-dead.jsonl",
			"warren dlq export --queue webhook --amqp-url \"$OLD\" | warren dlq import --queue webhook --amqp-url \"$NEW\" --yes -",
		},
		flags: func(fs *flagSet, o *dlqOptions) {
			fs.String(&o.to, "to", "QUEUE", "publish into QUEUE instead of the dead-letter queue; needed for messages whose headers name another origin queue", "")
			o.maxLineBytes = dlqtool.MaxLineBytes
			fs.Var(&o.maxLineBytes, "max-line-bytes", "SIZE", "refuse a file with a line longer than SIZE (bytes, or with KiB, MiB, GiB); reading a line holds about twice the line in memory (default 16MiB)")
			fs.Bool(&o.allowDuplicates, "allow-duplicates", "import the file even if its messages from an earlier import are still in the target queue")
			o.maxSpoolBytes = defaultMaxSpoolBytes
			fs.Var(&o.maxSpoolBytes, "max-spool-bytes", "SIZE", "refuse standard input, a FIFO or a process substitution longer than SIZE, which is copied to a temporary file in $TMPDIR (a tmpfs holds it in memory) to be read twice; a regular file is read where it is (default 1GiB)")
			fs.Bool(&o.yes, "yes", "do not ask for confirmation")
			o.jsonFlag(fs)
		},
		run: runDLQImport,
	},
}

// defaultMaxSpoolBytes bounds the copy an import makes of input it cannot
// read twice: room for an export of about a million small dead letters,
// while a runaway writer fails with a clear error rather than filling
// $TMPDIR, which may be a tmpfs held in memory.
const defaultMaxSpoolBytes = 1 << 30

// dlqOptions holds every flag of every subcommand; each registers its own.
type dlqOptions struct {
	queue, amqpURL string
	managementURL  string
	json           bool

	types, classes, ids  listFlag
	errorText            string
	olderThan, newerThan ageFlag
	limit, top           int
	rate                 float64
	to, output, by       string
	archive              string
	dryRun, yes          bool
	allowDuplicates      bool
	maxLineBytes         sizeFlag
	maxSpoolBytes        sizeFlag
}

func (o *dlqOptions) commonFlags(fs *flagSet) {
	fs.String(&o.queue, "queue", "NAME", "the consumer's name (its dead-letter queue is NAME.dlq), or the queue's full name; required, except by stats", "")
	fs.String(&o.amqpURL, "amqp-url", "URL", "the broker, or a cluster's nodes separated by commas; default $AMQP_URL, else "+redact.URL(amqpx.DefaultURL), "")
}

func (o *dlqOptions) filterFlags(fs *flagSet) {
	fs.Var(&o.types, "type", "PREFIX", "only events whose type starts with PREFIX, e.g. workitem. (repeatable, or comma-separated)")
	fs.Var(&o.classes, "class", "CLASS", "only this error class: "+classNames()+" (repeatable, or comma-separated)")
	fs.String(&o.errorText, "error", "TEXT", "only messages whose error contains TEXT", "")
	fs.Var(&o.olderThan, "older-than", "AGE", "only messages that died at least AGE ago: 90s, 30m, 2h, 7d")
	fs.Var(&o.newerThan, "newer-than", "AGE", "only messages that died less than AGE ago")
	fs.Var(&o.ids, "id", "EVENT_ID", "only this event: its message_id or its body's event_id (repeatable, or comma-separated)")
}

func (o *dlqOptions) limitFlag(fs *flagSet, def int) {
	fs.Int(&o.limit, "limit", "N", "at most N messages; 0 means no limit", def)
}

func (o *dlqOptions) jsonFlag(fs *flagSet) {
	fs.Bool(&o.json, "json", "print JSON for scripts instead of text")
}

func (o *dlqOptions) changeFlags(fs *flagSet) {
	fs.Bool(&o.dryRun, "dry-run", "show what would be done and change nothing")
	fs.Bool(&o.yes, "yes", "do not ask for confirmation")
	o.jsonFlag(fs)
}

// filter turns the filter flags into a dlqtool.Filter, or a usage error.
func (o *dlqOptions) filter() (dlqtool.Filter, error) {
	f := dlqtool.Filter{
		TypePrefixes: o.types, ErrorContains: o.errorText, EventIDs: o.ids,
		OlderThan: time.Duration(o.olderThan), NewerThan: time.Duration(o.newerThan),
	}
	for _, name := range o.classes {
		c, err := dlqtool.ParseClass(name)
		if err != nil {
			return f, usagef("--class: %v", strings.TrimPrefix(err.Error(), dlqtool.ErrBadFilter.Error()+": "))
		}
		f.Classes = append(f.Classes, c)
	}
	if err := f.Validate(); err != nil {
		return f, usagef("%v", err)
	}
	return f, nil
}

func classNames() string {
	names := make([]string, len(dlq.Classes))
	for i, c := range dlq.Classes {
		names[i] = string(c)
	}
	return strings.Join(names, ", ")
}

// dlqCall is one run of a subcommand, connected and with flags parsed.
type dlqCall struct {
	env    *cliEnv
	sub    *dlqSub
	opts   *dlqOptions
	fs     *flagSet
	filter dlqtool.Filter
	args   []string
	conn   *amqp.Connection
	queue  *dlqtool.Queue
}

func runDLQ(ctx context.Context, env *cliEnv, args []string) error {
	p, err := dlqVerbs.parse(env, args)
	if err != nil {
		return err
	}
	o := p.opts
	call := &dlqCall{env: env, sub: p.verb, opts: o, fs: p.fs, args: p.args}
	if err := call.validate(); err != nil {
		return err
	}
	rawURL := cmp.Or(o.amqpURL, env.getenv("AMQP_URL"), amqpx.DefaultURL)
	// A malformed URL is a usage error (exit 2), whether it came from
	// --amqp-url or $AMQP_URL: the rule of every warren command, so a
	// script tells "fix the configuration" from "the broker failed" (1).
	if err := amqpx.CheckURL(rawURL); err != nil {
		src := "--amqp-url"
		if o.amqpURL == "" {
			src = "$AMQP_URL"
		}
		return usagef("%s: %v", src, err)
	}
	err = call.connectAndRun(ctx, rawURL)
	return redact.Error(err, amqpx.SplitURLs(rawURL)...)
}

// validate checks the command line before anything touches the broker.
func (c *dlqCall) validate() error {
	o := c.opts
	if o.queue == "" && c.sub.name != "stats" {
		return usagef("%s: --queue is required", c.sub.name)
	}
	var err error
	if c.filter, err = o.filter(); err != nil {
		return err
	}
	switch {
	case o.limit < 0:
		return usagef("--limit must not be negative")
	case o.top < 0:
		return usagef("--top must not be negative")
	case o.rate < 0 || o.rate != o.rate:
		return usagef("--rate must be a positive number of messages a second")
	}
	switch c.sub.name {
	case "show":
		c.filter.EventIDs = append(c.filter.EventIDs, c.args...)
		if len(c.args) > 0 && !c.fs.isSet("limit") {
			o.limit = 0
		}
	case "import":
		if len(c.args) != 1 {
			return usagef("import: want one FILE (or - for standard input), got %d arguments", len(c.args))
		}
	default:
		if len(c.args) > 0 {
			return usagef("%s: unexpected argument %q (it takes flags only; see 'warren dlq %s --help')", c.sub.name, c.args[0], c.sub.name)
		}
	}
	if c.sub.name == "stats" {
		for _, by := range strings.Split(o.by, ",") {
			if by := strings.TrimSpace(by); by != "class" && by != "type" && by != "error" && by != "field" {
				return usagef("--by: unknown grouping %q (want class, type, error, field)", by)
			}
		}
	}
	if c.sub.changes && !o.dryRun && !o.yes {
		if !isTerminal(dlqStdin) || (c.sub.name == "import" && c.args[0] == "-") {
			return usagef("%s changes queues: pass --yes to confirm (there is no terminal to ask on)", c.sub.name)
		}
	}
	return nil
}

func (c *dlqCall) connectAndRun(ctx context.Context, rawURL string) error {
	// Human output says first which broker it acts on, password masked:
	// with a test and a production broker, output that does not say
	// misleads, and an operator must know before answering a prompt.
	// Export's standard output is the data, so it says it on stderr.
	if !c.opts.json {
		w := c.env.stdout
		if c.sub.name == "export" {
			w = c.env.stderr
		}
		printBroker(w, rawURL)
	}
	conn, err := amqpx.Dial(ctx, rawURL, amqpx.DialOptions{Name: "warren dlq " + c.sub.name})
	if err != nil {
		return err
	}
	// A broker under a memory or disk alarm blocks a connection that
	// publishes (replay, import) until the alarm clears: say so, or the
	// stall looks like a hang. The watcher ends when the connection closes.
	var watcher sync.WaitGroup
	defer watcher.Wait()
	watcher.Go(amqpx.WatchBlocked(conn, nil, func(blocked bool, reason string) {
		switch {
		case blocked:
			fmt.Fprintf(c.env.stderr, "warren: the broker blocked the connection (%s); publishing waits until its alarm clears\n", reason)
		case reason == "":
			fmt.Fprintln(c.env.stderr, "warren: the broker unblocked the connection")
		}
	}))
	// Bounded: a broker that stopped reading must not hang the exit.
	defer amqpx.CloseConnection(conn, amqpx.CloseTimeout)
	c.conn = conn
	if c.opts.queue == "" { // stats of every DLQ, which validate allows
		return runDLQStatsAll(ctx, c, rawURL)
	}
	if c.queue, err = dlqtool.Open(ctx, conn, c.opts.queue); err != nil {
		return err
	}
	return c.sub.run(ctx, c)
}

// checkTarget fails unless the queue --to names exists, before a replay or
// an import reads, asks or publishes anything: found only at the first
// publish, a missing target was reported after a summary of nothing done.
// The passive declare runs on a channel of its own, which the broker
// closes when the queue is missing.
func (c *dlqCall) checkTarget(ctx context.Context) error {
	if c.opts.to == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, amqpx.SetupTimeout)
	defer cancel()
	err := amqpx.Bound(ctx, c.conn, func() error {
		ch, err := c.conn.Channel()
		if err != nil {
			return fmt.Errorf("open channel: %w", err)
		}
		defer ch.Close() // within the bound
		_, err = ch.QueueDeclarePassive(c.opts.to, false, false, false, false, nil)
		return err
	})
	var amqpErr *amqp.Error
	if errors.As(err, &amqpErr) && amqpErr.Code == amqp.NotFound {
		return fmt.Errorf("--to %s: %w on this broker; nothing was changed", clean(c.opts.to), dlqtool.ErrNoQueue)
	}
	if err != nil {
		return fmt.Errorf("--to %s: %w", clean(c.opts.to), err)
	}
	return nil
}

// confirm asks the question on the terminal unless --yes was given (validate
// made sure there is a terminal otherwise).
func (c *dlqCall) confirm(ctx context.Context, question string) error {
	if c.opts.yes {
		return nil
	}
	return confirm(ctx, c.env, dlqStdin, question)
}

func readAnswer(r io.Reader) (string, error) {
	var b strings.Builder
	buf := make([]byte, 1)
	for {
		n, err := r.Read(buf)
		if n == 1 {
			if buf[0] == '\n' {
				return b.String(), nil
			}
			b.WriteByte(buf[0])
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				return b.String(), nil
			}
			return "", err
		}
	}
}

var (
	// dlqStdin is where confirmations are read from.
	dlqStdin io.Reader = os.Stdin
	// isTerminal reports whether f is an *os.File on a terminal. Tests
	// replace it.
	isTerminal = fileIsTerminal
)
