package main

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/warrenmq/warren/dlq"
	"github.com/warrenmq/warren/dlqtool"
	"github.com/warrenmq/warren/internal/archivefile"
	"github.com/warrenmq/warren/internal/inventory"
)

func runDLQList(ctx context.Context, c *dlqCall) error {
	msgs, total, err := c.list(ctx)
	if err != nil || c.opts.json {
		return err
	}
	depth, err := c.queue.Count(ctx)
	if err != nil {
		return err
	}
	if len(msgs) == 0 {
		fmt.Fprintf(c.env.stdout, "no matching messages (%d in %s)\n", depth, c.queue.Name())
		return nil
	}
	now := time.Now()
	tw := tabwriter.NewWriter(c.env.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "POS\tEVENT ID\tTYPE\tCLASS\tATTEMPTS\tDIED\tERROR")
	for _, m := range msgs {
		md := m.Metadata
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%s\t%s\n", m.Position, c.cell(m.EventID, 40), c.cell(m.EventType, 32),
			c.cell(string(md.Class), 12), md.Attempts, age(md.LastFailure, now), c.cell(md.Error, 70))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(c.env.stdout)
	if len(msgs) < total {
		showing(c.env.stdout, len(msgs), total, fmt.Sprintf("%d messages in %s; --limit 0 shows all", depth, c.queue.Name()))
	} else {
		fmt.Fprintf(c.env.stdout, "%d shown; %d messages in %s\n", len(msgs), depth, c.queue.Name())
	}
	return nil
}

// listing is the --json of ls and show: an object, not a bare array, so
// that it can say how many messages match when --limit cut the list.
type listing struct {
	Queue string `json:"queue"`
	// Total is how many messages match the filters, listed or not.
	Total    int               `json:"total"`
	Messages []dlqtool.Message `json:"messages"`
}

// list reads the messages ls and show print, and how many match in all;
// with --json it prints them.
func (c *dlqCall) list(ctx context.Context) ([]dlqtool.Message, int, error) {
	msgs, err := c.peek(ctx)
	if err != nil {
		return nil, 0, err
	}
	total, err := c.matching(ctx, len(msgs))
	if err != nil {
		return nil, 0, err
	}
	if c.opts.json {
		return msgs, total, writeJSON(c.env.stdout, listing{Queue: c.queue.Name(), Total: total, Messages: msgs})
	}
	return msgs, total, nil
}

// matching is how many messages match the filters in all, given that a
// read with --limit returned shown of them. When the limit may have cut the
// list that is the queue's depth without filters, else a second read that
// counts them (the first stopped at the limit).
func (c *dlqCall) matching(ctx context.Context, shown int) (int, error) {
	if c.opts.limit == 0 || shown < c.opts.limit {
		return shown, nil
	}
	if c.filter.IsZero() {
		n, err := c.queue.Count(ctx)
		return max(n, shown), err
	}
	prog, done := c.progress("counting", "matched")
	st, err := c.queue.Stats(ctx, dlqtool.StatsOptions{Filter: c.filter, Progress: prog})
	done()
	return max(st.Total, shown), err
}

// cell is the package's cell for a table column of human output, cut to
// max runes only on a terminal, where a long error would wrap the table:
// output piped to grep or a file gets the whole text.
func (c *dlqCall) cell(s string, max int) string {
	if !isTerminal(c.env.stdout) {
		max = math.MaxInt
	}
	return cell(s, max)
}

func (c *dlqCall) peek(ctx context.Context) ([]dlqtool.Message, error) {
	prog, done := c.progress("reading", "matched")
	msgs, err := c.queue.Peek(ctx, dlqtool.PeekOptions{Filter: c.filter, Limit: c.opts.limit, Progress: prog})
	done()
	if msgs == nil {
		msgs = []dlqtool.Message{}
	}
	return msgs, err
}

func runDLQShow(ctx context.Context, c *dlqCall) error {
	msgs, total, err := c.list(ctx)
	if err != nil || c.opts.json {
		return err
	}
	if len(msgs) == 0 {
		return fmt.Errorf("no matching message in %s", c.queue.Name())
	}
	for i, m := range msgs {
		if i > 0 {
			fmt.Fprintln(c.env.stdout)
		}
		if err := printMessage(c.env.stdout, &m, c.queue.Consumer(), time.Now()); err != nil {
			return err
		}
	}
	if len(msgs) < total {
		fmt.Fprintln(c.env.stdout)
		showing(c.env.stdout, len(msgs), total, "--limit N shows more, --limit 0 all")
	}
	return nil
}

// printMessage prints m, read from the dead-letter queue of the queue
// home, which is where a replay sends it.
func printMessage(w io.Writer, m *dlqtool.Message, home string, now time.Time) error {
	md := m.Metadata
	fmt.Fprintf(w, "── message at position %d ──\n", m.Position)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, v string) {
		if v != "" {
			fmt.Fprintf(tw, "  %s\t%s\n", k, v)
		}
	}
	row("event id", clean(m.EventID))
	row("event type", clean(m.EventType))
	row("class", clean(string(md.Class)))
	row("error", clean(md.Error))
	row("attempts", strconv.Itoa(md.Attempts))
	row("first failure", when(md.FirstFailure, now))
	row("last failure", when(md.LastFailure, now))
	row("origin queue", clean(md.OriginQueue))
	if md.OriginExchange != "" || md.OriginRoutingKey != "" {
		row("origin", fmt.Sprintf("exchange %q, routing key %q", md.OriginExchange, md.OriginRoutingKey))
	}
	replaysTo := clean(home)
	if origin := m.Origin(); origin != "" && origin != home {
		// The headers may be a producer's forgery; the replay ignores them.
		replaysTo += fmt.Sprintf(" (not %s, which its headers name as its origin)", clean(origin))
	}
	row("replays to", replaysTo)
	row("consumer", clean(md.Consumer))
	row("host", clean(md.Host))
	if md.Replays > 0 {
		row("replays", strconv.Itoa(md.Replays))
	}
	if fd := md.FirstDeath; fd.Reason != "" {
		// Kept by dlq.StripDeaths when the message was moved back from a
		// DLQ or retried: the x-death it came from is gone.
		v := fmt.Sprintf("%s from queue %s", clean(fd.Reason), clean(fd.Queue))
		if !fd.Time.IsZero() {
			v += " at " + when(fd.Time, now)
		}
		row("first broker death", v)
	}
	for i, d := range md.Deaths {
		row(fmt.Sprintf("x-death[%d]", i), fmt.Sprintf("%s from queue %s ×%d at %s (exchange %q, keys %q)",
			clean(d.Reason), clean(d.Queue), d.Count, when(d.Time, now), d.Exchange, d.RoutingKeys))
	}
	for _, p := range md.Problems {
		row("problem", clean(p))
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	fmt.Fprintln(w, "  properties:")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, p := range []struct{ k, v string }{
		{"content_type", m.ContentType}, {"content_encoding", m.ContentEncoding},
		{"delivery_mode", nonZero(m.DeliveryMode)}, {"priority", nonZero(m.Priority)},
		{"correlation_id", m.CorrelationId}, {"reply_to", m.ReplyTo}, {"expiration", m.Expiration},
		{"message_id", m.MessageId}, {"timestamp", when(m.Timestamp, now)}, {"type", m.Type},
		{"user_id", m.UserId}, {"app_id", m.AppId},
	} {
		if p.v != "" {
			fmt.Fprintf(tw, "    %s\t%s\n", p.k, clean(p.v))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(m.Headers) > 0 {
		fmt.Fprintln(w, "  headers:")
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		keys := make([]string, 0, len(m.Headers))
		for k := range m.Headers {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(tw, "    %s\t%s\n", clean(k), clean(dlqtool.HeaderText(m.Headers[k])))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	fmt.Fprintf(w, "  body (%d bytes):\n", len(m.Body))
	fmt.Fprintln(w, indent(bodyText(m.Body), "    "))
	return nil
}

func bodyText(body []byte) string {
	if !utf8.Valid(body) {
		return fmt.Sprintf("(not UTF-8; hex) %x", body)
	}
	var pretty bytes.Buffer
	if json.Indent(&pretty, body, "", "  ") == nil {
		return cleanLines(pretty.String())
	}
	return cleanLines(string(body))
}

func runDLQStats(ctx context.Context, c *dlqCall) error {
	prog, done := c.progress("counting", "matched")
	st, err := c.queue.Stats(ctx, dlqtool.StatsOptions{Filter: c.filter, Progress: prog})
	done()
	if err != nil {
		return err
	}
	if c.opts.json {
		return writeJSON(c.env.stdout, st)
	}
	return c.printStats(st)
}

// runDLQStatsAll is stats without --queue: every warren DLQ of the vhost,
// as the management API lists them, each counted exactly by reading it.
func runDLQStatsAll(ctx context.Context, c *dlqCall, rawURL string) error {
	inv, err := inventory.New(rawURL, c.opts.managementURL)
	if err != nil {
		return err
	}
	consumers, err := inv.Consumers(ctx)
	if err != nil {
		return err
	}
	all := struct {
		Total  int             `json:"total"`
		Queues []dlqtool.Stats `json:"queues"`
	}{Queues: []dlqtool.Stats{}}
	for _, consumer := range consumers {
		// A DLQ deleted since the management API listed it holds no dead
		// letters: skipped, rather than failing the count of all the others.
		q, err := dlqtool.Open(ctx, c.conn, consumer.DLQ.Name)
		if errors.Is(err, dlqtool.ErrNoQueue) {
			continue
		}
		if err != nil {
			return err
		}
		st, err := q.Stats(ctx, dlqtool.StatsOptions{Filter: c.filter})
		if errors.Is(err, dlqtool.ErrNoQueue) {
			continue
		}
		if err != nil {
			return fmt.Errorf("%s: %w", consumer.DLQ.Name, err)
		}
		all.Total += st.Total
		all.Queues = append(all.Queues, st)
	}
	if c.opts.json {
		return writeJSON(c.env.stdout, all)
	}
	w := c.env.stdout
	fmt.Fprintf(w, "%d dead messages in %d dead-letter queues of vhost %s", all.Total, len(all.Queues), inv.Vhost())
	if !c.filter.IsZero() {
		fmt.Fprint(w, " matching the filters")
	}
	fmt.Fprintln(w)
	if len(all.Queues) == 0 {
		fmt.Fprintln(w, "(no queue named NAME.dlq: no warren consumer has run on this vhost)")
		return nil
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "DEAD-LETTER QUEUE\tDEAD")
	for _, st := range all.Queues {
		fmt.Fprintf(tw, "%s\t%d\n", c.cell(st.Queue, 60), st.Total)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, st := range all.Queues {
		if st.Total == 0 {
			continue
		}
		fmt.Fprintln(w)
		if err := c.printStats(st); err != nil {
			return err
		}
	}
	return nil
}

// printStats prints one DLQ's groups for a human.
func (c *dlqCall) printStats(st dlqtool.Stats) error {
	w := c.env.stdout
	fmt.Fprintf(w, "%s: %d dead messages", st.Queue, st.Total)
	if !c.filter.IsZero() {
		fmt.Fprint(w, " matching the filters")
	}
	fmt.Fprintln(w)
	now := time.Now()
	for _, by := range strings.Split(c.opts.by, ",") {
		var title string
		var groups []dlqtool.Group
		switch strings.TrimSpace(by) {
		case "class":
			title, groups = "CLASS", st.ByClass
		case "type":
			title, groups = "EVENT TYPE", st.ByType
		case "error":
			title, groups = "ERROR SIGNATURE", st.ByError
		}
		fmt.Fprintln(w)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "%s\tCOUNT\tOLDEST\tNEWEST", title)
		if title == "ERROR SIGNATURE" {
			// The signature hides the particulars (which id, which
			// host); one real error of the group shows them.
			fmt.Fprint(tw, "\tEXAMPLE")
		}
		fmt.Fprintln(tw)
		shown := groups
		if c.opts.top > 0 && len(shown) > c.opts.top {
			shown = shown[:c.opts.top]
		}
		for _, g := range shown {
			key := c.cell(g.Key, 60)
			if g.Key == "" {
				key = "(none)"
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s", key, g.Count, age(g.Oldest, now), age(g.Newest, now))
			if title == "ERROR SIGNATURE" {
				fmt.Fprintf(tw, "\t%s", c.cell(g.Example, 60))
			}
			fmt.Fprintln(tw)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if more := len(groups) - len(shown); more > 0 {
			fmt.Fprintf(w, "… and %d more (--top 0 shows all)\n", more)
		}
	}
	return nil
}

func runDLQReplay(ctx context.Context, c *dlqCall) error {
	if err := c.checkTarget(ctx); err != nil {
		return err
	}
	opts := dlqtool.ReplayOptions{Filter: c.filter, Rate: c.opts.rate, To: c.opts.to}
	return c.change(ctx, "replay", func(dry dlqtool.Result) string {
		q := fmt.Sprintf("Replay %d of %d messages in %s to %s?", dry.Matched, dry.Total, c.queue.Name(), queueList(dry.Queues))
		if dry.ForeignOrigin > 0 {
			q += fmt.Sprintf(" (%d of them name another origin queue in their headers, which the replay ignores)", dry.ForeignOrigin)
		}
		return q
	}, func(s step) (dlqtool.Result, error) {
		opts.DryRun, opts.Limit, opts.Progress, opts.OnMatch = s.dryRun, s.limit, s.progress, s.onMatch
		opts.Filter.Fingerprints = s.fingerprints
		return c.queue.Replay(ctx, opts)
	})
}

func runDLQPurge(ctx context.Context, c *dlqCall) (err error) {
	opts := dlqtool.PurgeOptions{Filter: c.filter}
	var res dlqtool.Result
	path := c.opts.archive
	if path != "" && !c.opts.dryRun {
		// Created before the question, so a path that cannot be written
		// fails before anything is asked or read.
		archive, err := archivefile.Create(path)
		if err != nil {
			return fmt.Errorf("--archive: %w; nothing was purged", err)
		}
		defer func() {
			archive.Close()
			if err != nil && res.Done == 0 { // the archive holds nothing purged
				os.Remove(path)
			}
		}()
		opts.Archive = archive
	}
	question := func(dry dlqtool.Result) string {
		q := fmt.Sprintf("Delete %d of %d messages in %s for good?", dry.Matched, dry.Total, c.queue.Name())
		if path != "" {
			q = fmt.Sprintf("Archive to %s, then delete %d of %d messages in %s?", path, dry.Matched, dry.Total, c.queue.Name())
		}
		return q
	}
	err = c.change(ctx, "purge", question, func(s step) (dlqtool.Result, error) {
		opts.DryRun, opts.Limit, opts.Progress, opts.OnMatch = s.dryRun, s.limit, s.progress, s.onMatch
		opts.Filter.Fingerprints = s.fingerprints
		res, err = c.queue.Purge(ctx, opts)
		return res, err
	})
	if err == nil && opts.Archive != nil && !c.opts.json {
		fmt.Fprintf(c.env.stdout, "archived %d messages to %s before purging them\n", res.Done, path)
	}
	return err
}

// step is one run of a replay or purge for change: its options beyond
// the filter.
type step struct {
	dryRun       bool
	limit        int
	progress     func(dlqtool.Progress)
	onMatch      func(*dlqtool.Message) // the dry run's, listing what it counts
	fingerprints []string               // the confirmed run's: exactly those
}

// change runs a replay or a purge. Asked on a terminal (no --yes, no
// --dry-run), it first runs do as a dry run so the question can give the
// real numbers, and then acts on exactly the messages the operator said
// yes to (their fingerprints, listed by the dry run): messages that
// matched while the question waited are left alone and counted, as the
// console does. Without the question (--yes), it acts on what the filter
// matches when it runs; so does a run after a separate --dry-run.
func (c *dlqCall) change(ctx context.Context, op string, question func(dlqtool.Result) string, do func(step) (dlqtool.Result, error)) error {
	var res dlqtool.Result
	var err error
	run := step{dryRun: c.opts.dryRun, limit: c.opts.limit}
	if !c.opts.dryRun && !c.opts.yes {
		var listed []string
		dry := step{dryRun: true, limit: run.limit, onMatch: func(m *dlqtool.Message) { listed = append(listed, m.Fingerprint()) }}
		c.withProgress("checking", "matched", func(p func(dlqtool.Progress)) { dry.progress = p; res, err = do(dry) })
		if err != nil && ctx.Err() != nil {
			// Ctrl-C while counting: a dry run changes nothing, so this
			// is the same stop as Ctrl-C at the question.
			return errInterrupted
		}
		if err != nil {
			return err
		}
		if res.Matched == 0 {
			return c.report(op, res, nil)
		}
		if err := c.confirm(ctx, question(res)); err != nil {
			return err
		}
		run.limit, run.fingerprints = res.Matched, listed
	}
	c.withProgress(verbs[op].doing, verbs[op].did, func(p func(dlqtool.Progress)) { run.progress = p; res, err = do(run) })
	return c.report(op, res, err)
}

func runDLQExport(ctx context.Context, c *dlqCall) (err error) {
	out, dest := c.env.stdout, "standard output"
	var file *os.File
	if c.opts.output != "" && c.opts.output != "-" {
		// Written under a temporary name and renamed when complete, so
		// the named file is never a partial export.
		dest = c.opts.output
		file, err = os.CreateTemp(filepath.Dir(dest), "."+filepath.Base(dest)+".*.tmp")
		if err != nil {
			return fmt.Errorf("create export file: %w", err)
		}
		defer func() {
			if err != nil {
				file.Close()
				os.Remove(file.Name())
			}
		}()
		out = file
	}
	var n int
	c.withProgress("exporting", "exported", func(p func(dlqtool.Progress)) {
		n, err = c.queue.Export(ctx, out, dlqtool.ExportOptions{Filter: c.filter, Limit: c.opts.limit, Progress: p})
	})
	if err != nil {
		return err
	}
	if file != nil {
		if err = file.Close(); err != nil {
			return fmt.Errorf("write %s: %w", dest, err)
		}
		if err = os.Rename(file.Name(), dest); err != nil {
			return fmt.Errorf("write %s: %w", dest, err)
		}
	}
	fmt.Fprintf(c.env.stderr, "exported %d messages from %s to %s\n", n, c.queue.Name(), dest)
	return nil
}

func runDLQImport(ctx context.Context, c *dlqCall) error {
	if err := c.checkTarget(ctx); err != nil {
		return err
	}
	file, name, err := openImport(ctx, c.args[0], int64(c.opts.maxSpoolBytes))
	if err != nil {
		return err
	}
	defer file.Close()
	target := cmp.Or(c.opts.to, c.queue.Name())
	id, err := importID(file)
	if err != nil {
		return fmt.Errorf("read %s: %w", name, err)
	}
	switch {
	case c.opts.allowDuplicates:
	case !dlq.IsQueueName(target):
		// A consumer's queue is not read for an earlier import: the read
		// would hold its whole backlog from the consumer until it ended,
		// and the consumer takes an import's messages as they come, so it
		// could not tell anyway. There the consumer's idempotency must.
		fmt.Fprintf(c.env.stderr, "warren: %s is not a dead-letter queue: not checked for an earlier import of this file\n", clean(target))
	default:
		// The same file imported twice would double every message in the
		// dead-letter queue, silently. Each import marks its messages with
		// a hash of the file; while they are there, a second import is
		// refused.
		switch found, err := c.queue.Imported(ctx, target, id); {
		case err != nil:
			return err
		case found:
			return fmt.Errorf("%s was already imported into %s: its messages there carry %s %s; importing it again would double them (--allow-duplicates imports it anyway)",
				name, target, dlqtool.HeaderImportID, id)
		}
	}
	var (
		res       dlqtool.Result
		confirmed bool
	)
	opts := dlqtool.ImportOptions{To: c.opts.to, ImportID: id, MaxLineBytes: int(c.opts.maxLineBytes), Checked: func(n int) error {
		err := c.confirm(ctx, fmt.Sprintf("Publish %d messages from %s into %s?", n, name, target))
		confirmed = err == nil
		return err
	}}
	c.withProgress(verbs["import"].doing, verbs["import"].did, func(p func(dlqtool.Progress)) {
		opts.Progress = p
		res, err = c.queue.ImportFile(ctx, file, opts)
	})
	if !confirmed { // nothing was published: the file was refused, or the operator said no
		if errors.Is(err, dlqtool.ErrLineTooLong) {
			err = fmt.Errorf("%w (raise the limit with --max-line-bytes)", err)
		}
		if errors.Is(err, dlqtool.ErrBadExport) {
			err = fmt.Errorf("%s: %w", name, err)
		}
		return err
	}
	return c.report("import", res, err)
}

// importID names an import by its file's content: the first 128 bits of
// its SHA-256, hex. It reads f from where it stands and seeks back there.
func importID(f io.ReadSeeker) (string, error) {
	start, err := f.Seek(0, io.SeekCurrent)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	if _, err := f.Seek(start, io.SeekStart); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)[:16]), nil
}

// openImport opens what an import reads, named by arg ("-" for standard
// input). An import reads its input twice (checking every line before
// publishing any), so it needs a file it can seek in. A regular file is
// read where it is; anything else (standard input, a FIFO, a process
// substitution's /dev/fd/N) cannot be read again and is copied first to a
// temporary file in $TMPDIR, removed when the returned file is closed
// (on Linux at once: the open file outlives its name). The copy is at most
// maxBytes, as $TMPDIR may be a tmpfs held in memory, and it ends when ctx
// does: a writer that stalls does not hold the command past Ctrl-C.
func openImport(ctx context.Context, arg string, maxBytes int64) (*os.File, string, error) {
	if arg == "-" {
		return readable(ctx, dlqStdin, "standard input", maxBytes)
	}
	// Opening a FIFO waits for its writer.
	file, err := interruptible(ctx, func() (*os.File, error) { return os.Open(arg) })
	if err != nil {
		return nil, arg, err
	}
	f, name, err := readable(ctx, file, arg, maxBytes)
	if f != file {
		file.Close()
	}
	return f, name, err
}

// readable returns src if it is a regular file, or else a spool of it.
func readable(ctx context.Context, src io.Reader, name string, maxBytes int64) (*os.File, string, error) {
	if f, ok := src.(*os.File); ok {
		if info, err := f.Stat(); err == nil && info.Mode().IsRegular() {
			return f, name, nil
		}
	}
	f, err := spool(ctx, src, name, maxBytes)
	return f, name, err
}

// spool copies src to a temporary file in $TMPDIR, at most maxBytes, and
// returns it open at its start, its name already removed.
func spool(ctx context.Context, src io.Reader, name string, maxBytes int64) (*os.File, error) {
	f, err := os.CreateTemp("", "warren-import-*.jsonl")
	if err != nil {
		return nil, fmt.Errorf("spool %s: %w", name, err)
	}
	os.Remove(f.Name()) // the open file stays readable; an interrupt leaves nothing behind
	n, err := interruptible(ctx, func() (int64, error) { return io.Copy(f, io.LimitReader(src, maxBytes+1)) })
	if err == nil && n > maxBytes {
		err = fmt.Errorf("%s is longer than %d bytes, the most an import copies to $TMPDIR to read it twice; import a regular file, or raise the limit with --max-spool-bytes", name, maxBytes)
	} else if err == nil {
		if _, err = f.Seek(0, io.SeekStart); err == nil {
			return f, nil
		}
	}
	// Closing f also fails the next write of a copy still waiting on src.
	f.Close()
	return nil, fmt.Errorf("spool %s to $TMPDIR: %w", name, err)
}

// interruptible runs f, which waits on a writer (reading a pipe, opening a
// FIFO), and returns its result, or ctx's error as soon as ctx ends
// (Ctrl-C). A wait in the kernel for another process cannot be cancelled,
// so f then finishes on its own, when the writer acts or the process
// exits, and what it returns is thrown away: the command is on its way out.
func interruptible[T any](ctx context.Context, f func() (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := f()
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}

var verbs = map[string]struct{ doing, did, would string }{
	"replay": {"replaying", "replayed", "would replay"},
	"purge":  {"purging", "purged", "would purge"},
	"import": {"importing", "imported", "would import"},
}

// report prints what a changing operation did, then turns its error, if
// any, into one line that says what state the queues are in.
func (c *dlqCall) report(op string, res dlqtool.Result, opErr error) error {
	interrupted := errors.Is(opErr, context.Canceled)
	if c.opts.json {
		out := struct {
			Queue       string `json:"queue"`
			Operation   string `json:"operation"`
			Interrupted bool   `json:"interrupted,omitempty"`
			Error       string `json:"error,omitempty"`
			dlqtool.Result
		}{Queue: c.queue.Name(), Operation: op, Interrupted: interrupted, Result: res}
		if opErr != nil {
			out.Error = opErr.Error()
		}
		if err := writeJSON(c.env.stdout, out); err != nil {
			return err
		}
	} else {
		w := c.env.stdout
		verb := verbs[op].did
		if res.DryRun {
			verb = "dry run: " + verbs[op].would
		}
		if op == "import" {
			fmt.Fprintf(w, "%s %d of %d messages\n", verb, res.Done, res.Total)
		} else {
			n := res.Done
			if res.DryRun {
				n = res.Matched
			}
			fmt.Fprintf(w, "%s %d of %d messages in %s (%d looked at)\n", verb, n, res.Total, c.queue.Name(), res.Scanned)
		}
		for _, q := range slices.Sorted(mapsKeys(res.Queues)) {
			fmt.Fprintf(w, "  %6d → %s\n", res.Queues[q], clean(q))
		}
		if res.Unlisted > 0 {
			fmt.Fprintf(w, "  %6d others matching arrived after the question and were left where they were\n", res.Unlisted)
		}
		if res.ForeignOrigin > 0 {
			// Headers a producer may have forged: say where they pointed
			// and that the messages went home instead.
			fmt.Fprintf(w, "  %6d of them named another origin queue in their headers; replayed into %s, the queue %s belongs to, instead\n",
				res.ForeignOrigin, clean(c.queue.Consumer()), clean(c.queue.Name()))
		}
		if res.DryRun {
			fmt.Fprintln(w, "nothing was changed")
		}
	}
	switch {
	case opErr == nil:
		return nil
	case interrupted && op == "import":
		return fmt.Errorf("interrupted: imported the file's first %d of %d messages", res.Done, res.Total)
	case interrupted:
		return fmt.Errorf("interrupted: %s %d messages; every other message is still in %s", verbs[op].did, res.Done, c.queue.Name())
	}
	return opErr
}

func mapsKeys(m map[string]int) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func queueList(qs map[string]int) string {
	names := slices.Sorted(mapsKeys(qs))
	for i, n := range names {
		names[i] = clean(n)
	}
	return strings.Join(names, ", ")
}

// withProgress runs f with a progress callback that draws a bar on stderr
// when stderr is a terminal, and clears the bar afterwards.
func (c *dlqCall) withProgress(verb, doneWord string, f func(func(dlqtool.Progress))) {
	prog, done := c.progress(verb, doneWord)
	defer done()
	f(prog)
}

func (c *dlqCall) progress(verb, doneWord string) (func(dlqtool.Progress), func()) {
	if !isTerminal(c.env.stderr) {
		return nil, func() {}
	}
	bar := &progressBar{w: c.env.stderr, verb: verb, doneWord: doneWord, start: time.Now()}
	return bar.update, bar.clear
}

// progressBar draws one self-overwriting line. It stays silent for
// operations that finish quickly, so short commands do not flicker.
type progressBar struct {
	w              io.Writer
	verb, doneWord string
	start, last    time.Time
	drawn          bool
}

const progressDelay = 300 * time.Millisecond

func (b *progressBar) update(p dlqtool.Progress) {
	now := time.Now()
	if now.Sub(b.start) < progressDelay || now.Sub(b.last) < 100*time.Millisecond {
		return
	}
	b.last, b.drawn = now, true
	const width = 30
	filled := width
	if p.Total > 0 {
		filled = min(width, p.Scanned*width/p.Total)
	}
	done := p.Done
	if b.doneWord == "matched" { // reads and dry runs count what they select
		done = p.Matched
	}
	fmt.Fprintf(b.w, "\r%s [%s%s] %d/%d, %d %s", b.verb, strings.Repeat("=", filled), strings.Repeat(" ", width-filled),
		p.Scanned, p.Total, done, b.doneWord)
}

func (b *progressBar) clear() {
	if b.drawn {
		fmt.Fprint(b.w, "\r\033[K")
	}
}

func nonZero(n uint8) string {
	if n == 0 {
		return ""
	}
	return strconv.Itoa(int(n))
}
