package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/warrenmq/warren/internal/redact"
)

// command is one top-level verb. run gets the arguments after the verb.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, env *cliEnv, args []string) error
}

// commands lists the verbs in the order help shows them.
var commands = []command{
	{name: "dlq", summary: "inspect, replay, purge, export and import dead letters", run: runDLQ},
	relayCommand,
	outboxCommand,
	consoleCommand,
	contractsCommand,
}

// cliEnv is what every command reads and writes, so tests can run commands
// in process.
type cliEnv struct {
	stdout, stderr io.Writer
	getenv         func(string) string
}

// usageError marks a wrong command line: exit status 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{fmt.Sprintf(format, args...)} }

// interruptedError marks a command that Ctrl-C stopped before it changed
// anything (at a confirmation prompt): exit status 130, what a shell
// reports for a process ended by SIGINT, so a script can tell "the
// operator stopped it" from "it failed".
type interruptedError struct{ msg string }

func (e *interruptedError) Error() string { return e.msg }

var errInterrupted error = &interruptedError{"interrupted; nothing was changed"}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	env := &cliEnv{stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv}
	os.Exit(run(ctx, env, os.Args[1:]))
}

// run executes one command line and returns the exit status.
func run(ctx context.Context, env *cliEnv, args []string) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		printUsage(env.stdout)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	if args[0] == "--version" || args[0] == "version" {
		printVersion(env.stdout)
		return 0
	}
	for _, c := range commands {
		if c.name != args[0] {
			continue
		}
		// Every command's error is printed here, redacted: it may quote a
		// URL from a flag or the environment, or a broker's message.
		err := redact.Error(c.run(ctx, env, args[1:]))
		var usage *usageError
		var interrupted *interruptedError
		switch {
		case err == nil:
			return 0
		case errors.Is(err, flag.ErrHelp):
			return 0
		case errors.As(err, &interrupted):
			fmt.Fprintf(env.stderr, "warren %s: %v\n", c.name, err)
			return 130
		case errors.As(err, &usage):
			fmt.Fprintf(env.stderr, "warren %s: %v\nRun 'warren %s --help' for usage.\n", c.name, err, c.name)
			return 2
		default:
			fmt.Fprintf(env.stderr, "warren %s: %s\n", c.name, oneLine(err.Error()))
			return 1
		}
	}
	fmt.Fprintf(env.stderr, "warren: unknown command %q\nRun 'warren --help' for usage.\n", args[0])
	return 2
}

// oneLine folds a multi-line error (pgx lists every address it tried on a
// line of its own) into the one line a failed command prints.
func oneLine(s string) string {
	s = strings.ReplaceAll(s, ":\n\t", ": ")
	s = strings.ReplaceAll(s, "\n\t", "; ")
	return strings.ReplaceAll(s, "\n", " ")
}

// stampedVersion is the version a build from a checkout was stamped with
// (make build: -ldflags "-X main.stampedVersion=$(git describe --tags)");
// empty when it was not.
var stampedVersion string

// printVersion prints what a bug report needs: the version (a tagged 'go
// install' gives the module's; a build from a checkout, the one make
// build stamped, else what go build derived: a pseudo-version or
// "(devel)"), the VCS revision the binary was built from, and the Go
// toolchain.
func printVersion(w io.Writer) {
	version, revision, modified := "(devel)", "", false
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" {
			version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				revision = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
	}
	// The stamp is explicit, so it wins over what go build derived (a
	// pseudo-version from the checkout's commit, or "(devel)").
	if stampedVersion != "" {
		version = stampedVersion
	}
	fmt.Fprintf(w, "warren %s", version)
	if revision != "" {
		fmt.Fprintf(w, " revision %s", revision)
		if modified {
			fmt.Fprint(w, " (modified)")
		}
	}
	fmt.Fprintf(w, " %s %s/%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

func printUsage(w io.Writer) {
	fmt.Fprintln(w, "warren operates event-driven services on RabbitMQ: dead letters, the outbox relay and its table.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Usage:")
	fmt.Fprintln(w, "  warren <command> [arguments]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Commands:")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Environment: AMQP_URL, DATABASE_URL (local defaults).")
	fmt.Fprintln(w, "Run 'warren <command> --help' for a command's usage, 'warren --version' for the version.")
}
