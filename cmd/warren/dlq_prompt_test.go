package main

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/warrenmq/warren/internal/testenv"
)

// Ctrl-C at a [y/N] prompt ends the command at once, with exit status 130
// and nothing changed, rather than when Enter is pressed. On a real
// terminal: the prompt appears only when standard input is one, and Ctrl-C
// is the terminal's line discipline sending SIGINT to its foreground
// process group, so the binary runs in a session of its own with the pty
// as its controlling terminal.
func TestCLIInterruptAtPrompt(t *testing.T) {
	t.Run("dlq purge", func(t *testing.T) {
		conn, ch, top := testenv.NewDeadLetterTopology(t)
		testenv.PublishInOrder(t, conn, top.DLQ, deadMessages(top, 5))
		interruptAtPrompt(t, "for good? [y/N]", "dlq", "purge", "--queue", top.Consumer)
		testenv.WaitFor(t, 60*time.Second, "all 5 still in the DLQ", func() bool { return testenv.QueueDepth(t, ch, top.DLQ) == 5 })
	})
	t.Run("outbox redrive", func(t *testing.T) {
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
	ptmx, tty, err := pty.Open()
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
	var screen bytes.Buffer
	for !strings.Contains(screen.String(), prompt) {
		select {
		case c, ok := <-chunks:
			if !ok {
				t.Fatalf("the command ended without asking:\n%s", screen.String())
			}
			screen.Write(c)
		case <-ctx.Done():
			cmd.Process.Kill()
			t.Fatalf("no prompt within a minute:\n%s", screen.String())
		}
	}
	if _, err := ptmx.Write([]byte{0x03}); err != nil { // Ctrl-C
		t.Fatal(err)
	}

	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err = <-exited:
	case <-ctx.Done():
		// Generous: a command that waits for Enter never gets here.
		cmd.Process.Kill()
		t.Fatalf("still waiting at the prompt after Ctrl-C:\n%s", screen.String())
	}
	for c := range chunks {
		screen.Write(c)
	}
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 130 {
		t.Fatalf("exit %v after Ctrl-C at the prompt, want status 130:\n%s", err, screen.String())
	}
	if !strings.Contains(screen.String(), "interrupted; nothing was changed") {
		t.Errorf("the terminal shows no word of the interrupt:\n%s", screen.String())
	}
}
