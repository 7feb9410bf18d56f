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
	br   *bufio.Reader
	max  int
	line int // the number of the line last read
}

func newExportReader(r io.Reader, maxLineBytes int) *exportReader {
	max := cmp.Or(maxLineBytes, MaxLineBytes)
	// The buffer holds the longest line and its newline. Fed small reads,
	// bufio fills it only as far as the lines it is asked for reach, and
	// memory the program never writes is never given to it: a file of short
	// lines costs little, whatever the bound.
	return &exportReader{br: bufio.NewReaderSize(smallReads{r}, max+1), max: max}
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
		if errors.Is(err, bufio.ErrBufferFull) {
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
