package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// docCommand is a warren command line found in a fenced code block of the
// docs: what a reader copies and runs.
type docCommand struct {
	where string // file:line
	args  []string
}

// docCommands reads the fenced code blocks of the Markdown files and
// returns each warren command in them, its continuation lines joined and
// its comment and redirection cut. A line that lists several commands in
// one (warren dlq ls | show | stats) is shorthand, not a command.
func docCommands(t *testing.T, files []string) []docCommand {
	t.Helper()
	start := regexp.MustCompile(`^(?:\$\s+)?(?:go run \./cmd/warren|warren)\s+(.*)$`)
	var out []docCommand
	for _, file := range files {
		text, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(string(text), "\n")
		fenced := false
		for i := 0; i < len(lines); i++ {
			line := strings.TrimSpace(lines[i])
			if strings.HasPrefix(line, "```") {
				fenced = !fenced
				continue
			}
			m := start.FindStringSubmatch(line)
			if !fenced || m == nil {
				continue
			}
			at := i + 1
			cmd := m[1]
			for strings.HasSuffix(strings.TrimSpace(stripComment(cmd)), `\`) && i+1 < len(lines) {
				cmd = strings.TrimSuffix(strings.TrimSpace(stripComment(cmd)), `\`) + " " + strings.TrimSpace(lines[i+1])
				i++
			}
			cmd = stripComment(cmd)
			if before, _, found := strings.Cut(cmd, ">"); found {
				cmd = before
			}
			if strings.Contains(cmd, " | ") || strings.Contains(cmd, " / ") {
				continue
			}
			out = append(out, docCommand{where: filepath.Base(file) + ":" + strconv.Itoa(at), args: strings.Fields(cmd)})
		}
	}
	return out
}

func stripComment(s string) string {
	if before, _, found := strings.Cut(s, " #"); found {
		return before
	}
	return s
}

// Every warren command the README and the docs show in a code block is
// one the command accepts: it runs (against services that are not there,
// and only for a moment) without a usage error. A renamed flag, a
// subcommand that moved, or a verb that needs a filter the doc leaves out
// (outbox redrive) fails here. Addresses are pointed nowhere, so no
// command reaches a real database or broker.
func TestDocsCommandsAreAccepted(t *testing.T) {
	t.Parallel()
	files := []string{"../../README.md"}
	docs, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, docs...)
	cmds := docCommands(t, files)
	if len(cmds) < 15 {
		t.Fatalf("found %d commands in the docs; the extraction is broken", len(cmds))
	}
	nowhere := map[string]string{
		"DATABASE_URL": "postgres://127.0.0.1:1/none?connect_timeout=1",
		"AMQP_URL":     "amqp://guest:guest@127.0.0.1:1/",
		"REDIS_URL":    "redis://127.0.0.1:1/0",
	}
	var wg sync.WaitGroup
	for _, c := range cmds {
		args := pointedNowhere(c.args, nowhere)
		wg.Go(func() {
			var stderr bytes.Buffer
			env := &cliEnv{stdout: &bytes.Buffer{}, stderr: &stderr, getenv: func(k string) string { return nowhere[k] }}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			// A command that changes queues or tables asks on a terminal
			// and needs --yes without one: what the reader runs is the
			// asking form, which is right.
			if code := run(ctx, env, args); code == 2 && !strings.Contains(stderr.String(), "there is no terminal to ask on") {
				t.Errorf("%s: warren %s: a usage error: %s", c.where, strings.Join(c.args, " "), strings.TrimSpace(stderr.String()))
			}
		})
	}
	wg.Wait()
}

// pointedNowhere replaces the values of the address flags with addresses
// where nothing answers, and placeholders (<queue>) with a name.
func pointedNowhere(args []string, nowhere map[string]string) []string {
	if len(args) > 0 && args[0] == "console" && !slices.Contains(args, "--listen") {
		// Not its default port, which a console the developer runs, or
		// another package's test, may hold.
		args = append(slices.Clone(args), "--listen", "127.0.0.1:0")
	}
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = a
		if strings.HasPrefix(a, "<") && strings.HasSuffix(a, ">") {
			out[i] = "x"
		}
		if i == 0 {
			continue
		}
		switch args[i-1] {
		case "--database-url":
			out[i] = nowhere["DATABASE_URL"]
		case "--amqp-url":
			out[i] = nowhere["AMQP_URL"]
		case "--management-url":
			out[i] = "http://127.0.0.1:1/"
		case "--health-addr", "--addr", "--listen":
			out[i] = "127.0.0.1:0"
		}
	}
	return out
}
