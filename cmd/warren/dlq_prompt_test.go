package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/dlq"
	"github.com/warrenmq/warren/dlqtool"
	"github.com/warrenmq/warren/internal/testenv"
)

// Ctrl-C at a [y/N] prompt ends the command at once, with exit status 130
// and nothing changed, rather than when Enter is pressed. On a real
// terminal: the prompt appears only when standard input is one, and Ctrl-C
// is the terminal's line discipline sending SIGINT to its foreground
// process group, so the binary runs in a session of its own with the pty
// as its controlling terminal.
func TestCLIInterruptAtPrompt(t *testing.T) {
	t.Parallel()
	t.Run("dlq purge", func(t *testing.T) {
		t.Parallel()
		conn, ch, top := testenv.NewDeadLetterTopology(t)
		testenv.PublishInOrder(t, conn, top.DLQ, deadMessages(top, 5))
		interruptAtPrompt(t, "for good? [y/N]", "dlq", "purge", "--queue", top.Consumer)
		testenv.WaitFor(t, 60*time.Second, "all 5 still in the DLQ", func() bool { return testenv.QueueDepth(t, ch, top.DLQ) == 5 })
	})
	t.Run("outbox redrive", func(t *testing.T) {
		t.Parallel()
		ob := testenv.NewOutboxTable(t)
		ob.PublishN("ev", 3)
		ob.Exec(`UPDATE {table} SET state = 'dead', attempts = 20, finished_at = now(), last_error = 'no route'`)
		interruptAtPrompt(t, "[y/N]", "outbox", "redrive", "--all", "--database-url", testenv.DatabaseURL(t), "--table", ob.Table.Name())
		if n := ob.Count("state = 'dead'"); n != 3 {
			t.Fatalf("%d of 3 rows still dead after Ctrl-C at the prompt", n)
		}
	})
}

// interruptAtPrompt runs warren with args on a pseudo-terminal, waits
// for prompt, types Ctrl-C, and fails t unless the command ends with
// status 130 and says nothing was changed.
func interruptAtPrompt(t *testing.T, prompt string, args ...string) {
	t.Helper()
	screen, err := atPrompt(t, prompt, func() {}, []byte{0x03}, args...) // Ctrl-C
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 130 {
		t.Fatalf("exit %v after Ctrl-C at the prompt, want status 130:\n%s", err, screen)
	}
	if !strings.Contains(screen, "interrupted; nothing was changed") {
		t.Errorf("the terminal shows no word of the interrupt:\n%s", screen)
	}
}

// atPrompt runs warren with args on a pseudo-terminal, waits for prompt,
// runs meanwhile, types answer, and returns how the command ended and
// what the terminal showed.
func atPrompt(t *testing.T, prompt string, meanwhile func(), answer []byte, args ...string) (screen string, err error) {
	t.Helper()
	ptmx, tty, err := testenv.OpenPTY()
	if err != nil {
		t.Fatal(err)
	}
	defer ptmx.Close()
	cmd := warrenCmd(t, nil, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true} // Ctty 0: the child's stdin
	if err := cmd.Start(); err != nil {
		tty.Close()
		t.Fatal(err)
	}
	tty.Close() // the child has its own; once it exits, reading ptmx ends

	// The terminal's output, as it comes; closed when the child is gone.
	chunks := make(chan []byte, 64)
	go func() {
		defer close(chunks)
		for {
			buf := make([]byte, 4096)
			n, err := ptmx.Read(buf)
			if n > 0 {
				chunks <- buf[:n]
			}
			if err != nil {
				return // EIO once no process holds the terminal
			}
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var shown bytes.Buffer
	for !strings.Contains(shown.String(), prompt) {
		select {
		case c, ok := <-chunks:
			if !ok {
				t.Fatalf("the command ended without asking:\n%s", shown.String())
			}
			shown.Write(c)
		case <-ctx.Done():
			cmd.Process.Kill()
			t.Fatalf("no prompt within a minute:\n%s", shown.String())
		}
	}
	meanwhile()
	if _, err := ptmx.Write(answer); err != nil {
		t.Fatal(err)
	}

	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err = <-exited:
	case <-ctx.Done():
		// Generous: a command that waits for Enter never gets here.
		cmd.Process.Kill()
		t.Fatalf("still waiting at the prompt after the answer:\n%s", shown.String())
	}
	for c := range chunks {
		shown.Write(c)
	}
	return shown.String(), err
}

// A replay or purge answered yes at its question acts on exactly the
// messages its count showed: two of them taken meanwhile by someone else
// and three more of the same filter arrived, it takes the three counted
// ones still there, and leaves the late ones, saying so.
func TestCLIConfirmedChangeTakesOnlyWhatWasCounted(t *testing.T) {
	t.Parallel()
	for _, op := range []string{"replay", "purge"} {
		t.Run(op, func(t *testing.T) {
			t.Parallel()
			conn, ch, top := testenv.NewDeadLetterTopology(t)
			testenv.PublishInOrder(t, conn, top.DLQ, deadMessages(top, 5))
			var late []amqp.Publishing
			for i := range 3 {
				late = append(late, top.Message(testenv.Dead{ID: fmt.Sprintf("late-%d", i), Type: "workitem.updated", Class: dlq.ClassExhausted, Err: "late"}))
			}
			meanwhile := func() {
				q, err := dlqtool.Open(context.Background(), conn, top.DLQ)
				if err != nil {
					t.Fatal(err)
				}
				first := deadMessages(top, 5)
				if res, err := q.Purge(context.Background(), dlqtool.PurgeOptions{Filter: dlqtool.Filter{EventIDs: []string{first[1].MessageId, first[3].MessageId}}}); err != nil || res.Done != 2 {
					t.Fatalf("take two away: %d, %v", res.Done, err)
				}
				testenv.PublishInOrder(t, conn, top.DLQ, late)
			}
			screen, err := atPrompt(t, "[y/N]", meanwhile, []byte("y\r"), "dlq", op, "--queue", top.Consumer)
			if err != nil {
				t.Fatalf("%s: %v\n%s", op, err, screen)
			}
			if !strings.Contains(screen, "3 others matching arrived after the question") {
				t.Errorf("the command does not say what it left:\n%s", screen)
			}
			left, err := dlqtool.Open(context.Background(), conn, top.DLQ)
			if err != nil {
				t.Fatal(err)
			}
			msgs, err := left.Peek(context.Background(), dlqtool.PeekOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, m := range msgs {
				ids = append(ids, m.EventID)
			}
			if want := []string{"late-0", "late-1", "late-2"}; !slices.Equal(ids, want) {
				t.Errorf("the DLQ holds %v, want only the late ones %v", ids, want)
			}
			if want := map[string]int{"replay": 3, "purge": 0}[op]; testenv.QueueDepth(t, ch, top.Consumer) != want {
				t.Errorf("the consumer's queue holds %d, want %d", testenv.QueueDepth(t, ch, top.Consumer), want)
			}
		})
	}
}
