package main

import (
	"fmt"
	"io"

	"github.com/warrenmq/warren/internal/amqpx"
	"github.com/warrenmq/warren/internal/redact"
)

func printDLQUsage(w io.Writer) {
	fmt.Fprint(w, `Usage: warren dlq <subcommand> --queue NAME [flags]

Inspect and repair a consumer's dead-letter queue (NAME.dlq): see what broke,
replay messages to the queue they failed in once the fix is out, purge what
cannot be saved, and move dead letters between brokers as JSON Lines.

Subcommands:
`)
	for _, s := range dlqSubs {
		fmt.Fprintf(w, "  %-7s %s\n", s.name, s.summary)
	}
	fmt.Fprintf(w, `
Reading (ls, show, stats, export) removes nothing: every message read is handed
back to the broker in its place (RabbitMQ marks it redelivered). Replay, purge
and import change queues: they ask first on a terminal and need --yes
otherwise; replay and purge take --dry-run. Output for people starts with the
broker and vhost acted on, password masked (export says it on stderr, its
standard output being the data); --json prints JSON only.

Common flags:
  --queue NAME       the consumer's name (its DLQ is NAME.dlq) or the DLQ's full name
  --amqp-url URL     the broker, or a cluster's nodes separated by commas;
                     default $AMQP_URL, else %s
  --json             print JSON for scripts (ls, show, stats, replay, purge, import)

Filters (ls, show, stats, replay, purge, export; all must match):
  --type PREFIX      event type starts with PREFIX, e.g. workitem.
  --class CLASS      %s
  --error TEXT       error text contains TEXT
  --older-than AGE   died at least AGE ago: 90s, 30m, 2h, 7d
  --newer-than AGE   died less than AGE ago
  --id EVENT_ID      this event
  --type, --class and --id repeat or take comma-separated lists (any may match).

Examples:
  warren dlq stats --queue webhook
  warren dlq ls --queue webhook --class permanent --limit 50
  warren dlq replay --queue webhook --type workitem. --limit 100
  warren dlq replay --queue webhook --error 'connection refused' --rate 50 --yes
  warren dlq export --queue webhook --output webhook-dead.jsonl
  warren dlq purge --queue webhook --class undecodable --older-than 7d --dry-run

Exit status: 0 success; 1 the operation failed or was interrupted while it
changed queues; 2 the command line was wrong (a malformed --amqp-url or
$AMQP_URL included); 130 Ctrl-C at a confirmation prompt, nothing changed.
Run 'warren dlq <subcommand> --help' for a subcommand's flags.
`, redact.URL(amqpx.DefaultURL), classNames())
}
