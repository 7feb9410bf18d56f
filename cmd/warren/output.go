package main

// What human output says about itself: where it reads from, and how much
// of what it found it shows.

import (
	"fmt"
	"io"
	"math"
	"net/url"
	"strings"

	"github.com/warrenmq/warren/internal/amqpx"
	"github.com/warrenmq/warren/internal/redact"
)

// printBroker prints, as the first line of human output, the broker (every
// node of the list) and vhost a command reads, password masked: with two
// brokers a command that does not say which one it read misleads.
func printBroker(w io.Writer, rawURLs string) {
	vhost := "/"
	if urls := amqpx.SplitURLs(rawURLs); len(urls) > 0 {
		if u, err := url.Parse(urls[0]); err == nil && u.Path != "" && u.Path != "/" {
			vhost, _ = url.PathUnescape(strings.TrimPrefix(u.Path, "/"))
		}
	}
	fmt.Fprintf(w, "broker %s, vhost %s\n", amqpx.RedactURLs(rawURLs), vhost)
}

// printDatabase is printBroker for a PostgreSQL connection string (URL or
// key=value form) and the outbox table it names.
func printDatabase(w io.Writer, conn, table string) {
	fmt.Fprintf(w, "database %s, table %s\n", redact.URL(conn), table)
}

// columnWidth returns what cell's width should be for output to w: the
// width asked for on a terminal, where a table must fit, and no cut at
// all otherwise, where the text is read by grep or kept in a file.
func columnWidth(w io.Writer) func(int) int {
	if isTerminal(w) {
		return func(n int) int { return n }
	}
	return func(int) int { return math.MaxInt }
}

// showing says how many of total rows a human listing printed, when it cut
// the list; scripts get every row from --json instead.
func showing(w io.Writer, shown, total int, more string) {
	if shown < total {
		fmt.Fprintf(w, "showing %d of %d; %s\n", shown, total, more)
	}
}
