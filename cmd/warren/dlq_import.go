package main

// dlq export and dlq import; an import's input that is not a regular file
// (a pipe, standard input) is spooled to a temporary file first, as the
// import reads it more than once.

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/warrenmq/warren/dlq"
	"github.com/warrenmq/warren/dlqtool"
)

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
