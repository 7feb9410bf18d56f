package dlqtool

// Export: a DLQ written to JSON Lines, and read back.

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// ExportOptions select the messages [Queue.Export] writes.
type ExportOptions struct {
	Filter Filter
	// Limit is the most messages to write. 0 means all that match.
	Limit    int
	Progress func(Progress)
}

// Export writes the matching messages to w as JSON Lines, head of the queue
// first, and leaves the queue as it was. It returns how many it wrote.
func (q *Queue) Export(ctx context.Context, w io.Writer, opts ExportOptions) (int, error) {
	if err := opts.Filter.Validate(); err != nil {
		return 0, err
	}
	if opts.Limit < 0 {
		return 0, errNegativeLimit
	}
	bw := bufio.NewWriter(w)
	var p Progress
	sel := opts.Filter.selector(time.Now())
	err := q.scan(ctx, prefetchFor(opts.Filter, opts.Limit, false), &p, opts.Progress, func(_ *amqp.Delivery, m *Message) (bool, error) {
		if !sel.take(m, &p) {
			return true, nil
		}
		p.Matched++
		line, err := m.MarshalJSON()
		if err != nil {
			return false, err
		}
		if _, err := bw.Write(append(line, '\n')); err != nil {
			return false, fmt.Errorf("write export: %w", err)
		}
		p.Done++
		return opts.Limit <= 0 || p.Done < opts.Limit, nil
	})
	if ferr := bw.Flush(); err == nil && ferr != nil {
		err = fmt.Errorf("write export: %w", ferr)
	}
	return p.Done, err
}

// ReadMessages reads a JSON Lines export back, checking every line before
// returning any, so a damaged file is refused whole rather than imported in
// part. Blank lines are skipped; lines are at most [MaxLineBytes]. Errors
// wrap [ErrBadExport] and name the line. It holds the whole file in memory;
// [Queue.ImportFile] imports one line at a time.
func ReadMessages(r io.Reader) ([]Message, error) {
	er := newExportReader(r, MaxLineBytes)
	var out []Message
	for {
		m, err := er.next(true)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
}

// exportReader reads an export one message at a time, each line in place
// in its read buffer, so reading holds one line (and the message decoded
// from it), never the file.
type exportReader struct {
	br      *bufio.Reader
	max     int
	longest int // when the buffer was sized to the longest line found by a first read; else 0
	line    int // the number of the line last read
}

// newExportReader reads r with a buffer that holds a line of maxLineBytes
// and its newline. Count that buffer as resident: the Go runtime zeroes a
// large allocation whole when it reuses memory, which depends on when the
// collector last ran. An import sizes it to the file's longest line
// instead (newExportReaderFor).
func newExportReader(r io.Reader, maxLineBytes int) *exportReader {
	max := cmp.Or(maxLineBytes, MaxLineBytes)
	return &exportReader{br: bufio.NewReaderSize(smallReads{r}, max+1), max: max}
}

// newExportReaderFor reads src, from where it stands, with a buffer of its
// longest line (or of maxLineBytes+1 when a line is longer, which next
// then refuses): a file of short lines costs little, whatever the bound.
// Finding the longest line reads src once more, in small pieces; src is
// left where it stood.
func newExportReaderFor(src io.ReadSeeker, maxLineBytes int) (*exportReader, error) {
	max := cmp.Or(maxLineBytes, MaxLineBytes)
	start, err := src.Seek(0, io.SeekCurrent)
	if err != nil {
		return nil, err
	}
	// A line holds at most max bytes and its newline; one byte more lets
	// the last line, without a newline, end before the buffer is full.
	longest, err := longestLine(src, max+1)
	if err != nil {
		return nil, err
	}
	if _, err := src.Seek(start, io.SeekStart); err != nil {
		return nil, err
	}
	r := &exportReader{br: bufio.NewReaderSize(smallReads{src}, min(longest, max)+1), max: max}
	if longest <= max {
		r.longest = longest
	}
	return r, nil
}

// longestLine is the length of r's longest line, its newline included,
// or limit+1 as soon as one is longer than limit.
func longestLine(r io.Reader, limit int) (int, error) {
	buf := make([]byte, 64<<10)
	longest, current, empty := 0, 0, 0
	for {
		n, err := r.Read(buf)
		// A reader that keeps returning nothing and no error would hold
		// the import for ever; bufio gives up on it the same way.
		if empty = empty + 1; n > 0 || err != nil {
			empty = 0
		} else if empty == 100 {
			return 0, io.ErrNoProgress
		}
		chunk := buf[:n]
		for len(chunk) > 0 {
			i := bytes.IndexByte(chunk, '\n')
			if i < 0 {
				current += len(chunk)
				break
			}
			longest = max(longest, current+i+1)
			current = 0
			chunk = chunk[i+1:]
		}
		if longest > limit || current > limit {
			return limit + 1, nil
		}
		if errors.Is(err, io.EOF) {
			return max(longest, current), nil
		}
		if err != nil {
			return 0, err
		}
	}
}

// smallReads passes on reads of at most 64 KiB, so a large bufio buffer
// is filled a line at a time rather than whole by each read.
type smallReads struct{ r io.Reader }

func (s smallReads) Read(p []byte) (int, error) { return s.r.Read(p[:min(len(p), 64<<10)]) }

// rewind starts reading src again from where it is, keeping the buffer.
func (r *exportReader) rewind(src io.Reader) {
	r.br.Reset(smallReads{src})
	r.line = 0
}

// next returns the next message, skipping blank lines, or io.EOF after the
// last. Without withBody, the message is checked but has no body. The
// message does not share memory with the reader. Errors wrap ErrBadExport
// and name the line.
func (r *exportReader) next(withBody bool) (Message, error) {
	for {
		r.line++
		line, err := r.br.ReadSlice('\n')
		switch {
		case errors.Is(err, bufio.ErrBufferFull) && r.longest > 0:
			// The buffer holds the longest line the first read found.
			err = fmt.Errorf("longer than when the file was first read (%d bytes): the file changed", r.longest)
		case errors.Is(err, bufio.ErrBufferFull):
			err = fmt.Errorf("%w: longer than %d bytes", ErrLineTooLong, r.max)
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return Message{}, fmt.Errorf("%w: line %d: %w", ErrBadExport, r.line, err)
		}
		if trimmed := bytes.TrimSpace(line); len(trimmed) > 0 {
			var m Message
			if uerr := m.decode(trimmed, withBody); uerr != nil {
				return Message{}, fmt.Errorf("%w: line %d: %w", ErrBadExport, r.line, uerr)
			}
			return m, nil
		}
		if errors.Is(err, io.EOF) {
			return Message{}, io.EOF
		}
	}
}
