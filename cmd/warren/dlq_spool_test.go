package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/warrenmq/warren/internal/testenv"
)

// exportOf returns the export lines of msgs, as `warren dlq export` writes them.
func exportOf(t *testing.T, top testenv.DeadLetterTopology, n int) []byte {
	t.Helper()
	var b bytes.Buffer
	for _, p := range deadMessages(top, n) {
		b.Write(exportLine(t, p))
	}
	return b.Bytes()
}

// A FIFO, like the /dev/fd/N of `warren dlq import <(warren dlq export …)`,
// cannot be read twice: the import copies it to $TMPDIR first and imports
// every message (it failed with "illegal seek" when it read the path as a
// file).
func TestCLIImportFromAFIFO(t *testing.T) {
	t.Parallel()
	conn, _, top := testenv.NewDeadLetterTopology(t)
	data := exportOf(t, top, 5)
	fifo := filepath.Join(t.TempDir(), "dead.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	wrote := make(chan error, 1)
	go func() {
		w, err := os.OpenFile(fifo, os.O_WRONLY, 0) // waits for the import to open it
		if err == nil {
			_, err = w.Write(data)
			w.Close()
		}
		wrote <- err
	}()
	r := runWarren(t, nil, "dlq", "import", "--queue", top.Consumer, "--yes", fifo)
	if r.code != 0 || !strings.Contains(r.stdout, "imported 5 of 5") {
		// Let the writer go if the import never opened the FIFO.
		if f, err := os.OpenFile(fifo, os.O_RDONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
		t.Fatalf("import from a FIFO: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	if n := len(testenv.Drain(t, conn, top.DLQ)); n != 5 {
		t.Fatalf("the DLQ holds %d messages after the import, want 5", n)
	}
}

// Input that must be copied to $TMPDIR is refused past --max-spool-bytes,
// with the flag named, before anything is published.
func TestCLIImportRefusesInputOverTheSpoolLimit(t *testing.T) {
	t.Parallel()
	conn, _, top := testenv.NewDeadLetterTopology(t)
	data := exportOf(t, top, 5)
	r := runWarren(t, data, "dlq", "import", "--queue", top.Consumer, "--yes", "--max-spool-bytes", "100", "-")
	if r.code != 1 || !strings.Contains(r.stderr, "--max-spool-bytes") || !strings.Contains(r.stderr, "standard input") {
		t.Fatalf("import of %d bytes with --max-spool-bytes 100: exit %d, stderr %q; want 1 naming standard input and --max-spool-bytes", len(data), r.code, r.stderr)
	}
	if n := len(testenv.Drain(t, conn, top.DLQ)); n != 0 {
		t.Fatalf("a refused import published %d messages", n)
	}
	if r := runWarren(t, data, "dlq", "import", "--queue", top.Consumer, "--yes", "--max-spool-bytes", "1MiB", "-"); r.code != 0 {
		t.Fatalf("import under the limit: exit %d, stderr %q", r.code, r.stderr)
	}
}

// An import reading standard input from a writer that stalls returns when
// its context ends, as main's does on Ctrl-C (signal.NotifyContext catches
// the signal, so only the context can stop the command). In process: the
// writer is an io.Pipe, whose Write returns only once the import has read
// the bytes, so the test knows the import is waiting for more.
func TestCLIImportFromAStalledWriterStopsOnCancel(t *testing.T) {
	// Serial: replaces the package's dlqStdin, which every in-process run
	// reads.
	conn, _, top := testenv.NewDeadLetterTopology(t)
	pr, pw := io.Pipe()
	t.Cleanup(func() { pw.Close() })
	oldStdin := dlqStdin
	t.Cleanup(func() { dlqStdin = oldStdin })
	dlqStdin = pr

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stderr bytes.Buffer
	env := &cliEnv{stdout: io.Discard, stderr: &stderr, getenv: func(k string) string {
		if k == "AMQP_URL" {
			return testenv.AMQPURL(t)
		}
		return ""
	}}
	code := make(chan int, 1)
	go func() { code <- run(ctx, env, []string{"dlq", "import", "--queue", top.Consumer, "--yes", "-"}) }()
	half := exportOf(t, top, 2)
	if _, err := pw.Write(half[:len(half)/2]); err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case c := <-code:
		if c == 0 || !strings.Contains(stderr.String(), "context canceled") {
			t.Fatalf("cancelled import: exit %d, stderr %q; want a failure saying it was cancelled", c, stderr.String())
		}
	case <-time.After(60 * time.Second):
		pw.Close()
		<-code
		t.Fatal("the import went on waiting for its stalled writer 60s after its context ended")
	}
	if n := len(testenv.Drain(t, conn, top.DLQ)); n != 0 {
		t.Fatalf("a cancelled import published %d messages", n)
	}
}
