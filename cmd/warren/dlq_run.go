package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"text/tabwriter"
	"time"

	"github.com/warrenmq/warren/cmd/warren/internal/archivefile"
	"github.com/warrenmq/warren/cmd/warren/internal/inventory"
	"github.com/warrenmq/warren/dlqtool"
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
