package main

// What a changing verb reports, and its progress bar.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/warrenmq/warren/dlqtool"
)

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
