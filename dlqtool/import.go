package dlqtool

// Import: exported messages published back, each once, to the queue they
// came from.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"runtime/debug"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/dlq"
	"github.com/warrenmq/warren/internal/amqpx"
)

// ImportOptions say where [Queue.Import] and [Queue.ImportFile] publish.
type ImportOptions struct {
	// To publishes to this queue instead of the dead-letter queue. Naming
	// it is also how an operator imports messages whose headers name
	// another origin queue (see [ErrForeignOrigin]).
	To string
	// DrainTimeout bounds the wait for the confirm of the message in
	// flight when ctx ends. Default [DefaultDrainTimeout].
	DrainTimeout time.Duration
	Progress     func(Progress)

	// MaxLineBytes bounds one line of the file [Queue.ImportFile] reads.
	// Default [MaxLineBytes].
	MaxLineBytes int
	// ImportID, if set, is written in every message published, as header
	// [HeaderImportID], so that [Queue.Imported] can tell later that this
	// import already happened. The command uses a hash of the file.
	ImportID string

	// Checked, if set, is called by [Queue.ImportFile] once every line of
	// the file has been checked, with the number of messages, before any
	// is published; an error from it ends the import with nothing
	// published (the command asks for confirmation here).
	Checked func(messages int) error
}

// Import publishes msgs, in order, to the dead-letter queue or opts.To,
// each with publisher confirms. Every message is checked before any is
// published: that it may go to the target, that the client can write it
// and a consumer's client read it back, and that the broker takes it (the
// message is sent to the broker under a routing key no queue has, which
// the broker checks and returns; nothing is stored). A refused message
// refuses the import, with an error wrapping [ErrUnpublishable] or
// [ErrForeignOrigin]. It stops at the first failure or when ctx ends (after the
// message in flight is confirmed or DrainTimeout passes); Result.Done says
// how many of msgs are now in the queue, so a caller can resume with
// msgs[Done:].
//
// Into a dead-letter queue (this one, or any whose name ends in ".dlq")
// messages go exactly as they are, headers included: that is where their
// history belongs. Into any other queue they go as [Queue.Replay] sends
// them: their failure record reset (error, class, attempts, failure times,
// RabbitMQ's x-death, through [dlq.StripDeaths]), the origin queue set to
// the one the dead-letter queue belongs to, and the replay count raised by
// one. The consumer trusts the history of such a delivery, so a message
// imported with its attempts spent would otherwise be dead-lettered again
// on its first failure, and one whose x-death names the queue it is
// imported into would be dropped by the broker on its first retry.
//
// Without opts.To, a message whose headers name an origin queue other than
// the one the dead-letter queue belongs to is refused before anything is
// published, with an error wrapping [ErrForeignOrigin]: in that DLQ the
// message would pass for one of its consumer's, though its headers, which
// anyone who wrote the file could set, say otherwise. Naming the target
// with opts.To is the operator saying the move is meant.
func (q *Queue) Import(ctx context.Context, msgs []Message, opts ImportOptions) (Result, error) {
	im := q.newImport(opts, len(msgs))
	defer im.close()
	for i := range msgs {
		if err := im.check(ctx, &msgs[i]); err != nil {
			return im.res, fmt.Errorf("import message %d (%s): %w", i+1, describe(&msgs[i]), err)
		}
	}
	if err := im.checkSizes(ctx); err != nil {
		return im.res, fmt.Errorf("import: %w", err)
	}
	if err := im.start(ctx); err != nil {
		return im.res, err
	}
	for i := range msgs {
		if err := im.publish(ctx, &msgs[i]); err != nil {
			return im.res, fmt.Errorf("import message %d (%s) to %q: %w", i+1, describe(&msgs[i]), im.target, err)
		}
	}
	return im.res, nil
}

// ImportFile publishes the messages of an export file, as [Queue.Import]
// does, holding one line of it in memory at a time: it reads src three
// times. A first read, in small pieces, finds the longest line, which
// sizes the read buffer. The checking pass checks every line (lines of at
// most opts.MaxLineBytes) and every message as Import does, and counts
// them, so a damaged file or a message the client or broker would refuse
// is refused whole, before anything is published; then opts.Checked is
// called. Memory holds the longest line and one decoded message, about
// twice the line. The publishing pass reads src again from the start and
// publishes each message as it is read. Both passes start where src stands when ImportFile is called.
// A file that changed between the passes stops the import there,
// with Result.Done messages published.
//
// Known limits: a line's bound counts a CRLF line's carriage return; a
// bound under 16 bytes admits lines of up to 15 (bufio's smallest
// buffer); a line whose text changes between the checking and publishing
// passes, but not its length, is published unchecked by the broker.
func (q *Queue) ImportFile(ctx context.Context, src io.ReadSeeker, opts ImportOptions) (Result, error) {
	im := q.newImport(opts, 0)
	defer im.close()
	start, err := src.Seek(0, io.SeekCurrent)
	if err != nil {
		return im.res, fmt.Errorf("import: %w", err)
	}
	checks, err := newExportReaderFor(src, opts.MaxLineBytes)
	if err != nil {
		return im.res, fmt.Errorf("import: %w", err)
	}
	for {
		if err := ctx.Err(); err != nil {
			return im.res, err
		}
		m, err := checks.next(false)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return im.res, err
		}
		if err := im.check(ctx, &m); err != nil {
			return im.res, fmt.Errorf("import: line %d (%s): %w", checks.line, describe(&m), err)
		}
		im.res.Total++
	}
	if err := im.checkSizes(ctx); err != nil {
		return im.res, fmt.Errorf("import: %w", err)
	}
	if opts.Checked != nil {
		if err := opts.Checked(im.res.Total); err != nil {
			return im.res, err
		}
	}
	if _, err := src.Seek(start, io.SeekStart); err != nil {
		return im.res, fmt.Errorf("import: rewind the file: %w", err)
	}
	if err := im.start(ctx); err != nil {
		return im.res, err
	}
	lines := checks
	lines.rewind(src)
	for {
		m, err := lines.next(true)
		if errors.Is(err, io.EOF) {
			break
		}
		if err == nil && im.res.Done == im.res.Total {
			err = errors.New("more messages than when it was checked")
		}
		if err != nil {
			return im.res, fmt.Errorf("import: the file changed after it was checked: %w", err)
		}
		if err := im.publish(ctx, &m); err != nil {
			return im.res, fmt.Errorf("import: line %d (%s) to %q: %w", lines.line, describe(&m), im.target, err)
		}
	}
	if im.res.Done < im.res.Total {
		return im.res, fmt.Errorf("import: the file changed after it was checked: %d messages, not %d", im.res.Done, im.res.Total)
	}
	return im.res, nil
}

// importer publishes messages one after another into an import's target.
type importer struct {
	q      *Queue
	opts   ImportOptions
	target string
	toDLQ  bool
	pub    *amqpx.Publisher
	probe  *prober
	// maxBody is the largest body checked, which checkSizes sends; body is
	// that body when it is in memory.
	maxBody int
	body    []byte
	res     Result
}

func (q *Queue) newImport(opts ImportOptions, total int) *importer {
	target := cmp.Or(opts.To, q.name)
	return &importer{q: q, opts: opts, target: target, toDLQ: target == q.name || dlq.IsQueueName(target),
		probe: newProber(q.conn), res: Result{Progress: Progress{Total: total}}}
}

// check is the checking pass's look at m, before anything is published:
// whether it may go to the target (publishing), whether the client can
// write it and a consumer's client read it back (checkPublishable), and
// whether the broker takes it (a probe that stores nothing). What it
// passes, the publishing pass can publish: an import does not stop part
// way on a message the broker or the client refuses. (What can still stop
// it is what changes in between: the broker's limits, the target queue's
// room, the connection.)
func (im *importer) check(ctx context.Context, m *Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	p, err := im.publishing(m)
	if err != nil {
		return err
	}
	if err := checkPublishable(p, im.q.conn.Config.FrameSize); err != nil {
		return err
	}
	// The broker judges a body by its size alone, so the probe of each
	// message goes without it and one probe of the largest body, at the
	// end (checkSizes), stands for them all: memory holds no more bodies
	// than the import itself does.
	if size := max(len(p.Body), m.bodySize); size > im.maxBody {
		im.maxBody, im.body = size, p.Body
	}
	p.Body = nil
	return im.probe.check(ctx, p)
}

// checkSizes asks the broker whether it takes the largest body checked
// (max_message_size), once every message has been checked.
func (im *importer) checkSizes(ctx context.Context) error {
	if im.maxBody == 0 {
		return nil
	}
	body := im.body
	if len(body) != im.maxBody { // read from a file without its body: its size stands for it
		body = make([]byte, im.maxBody)
	}
	im.body = nil
	if err := im.probe.check(ctx, amqp.Publishing{Body: body}); err != nil {
		return fmt.Errorf("the largest body, of %d bytes: %w", im.maxBody, err)
	}
	if im.maxBody >= releaseAfterProbe {
		// The probe's body is garbage now, as large as the largest
		// message, and the publishing pass is about to decode that
		// message again. Left to the collector, whether the two overlap
		// in memory depends on when it next runs (a 40 MB line peaked at
		// 2.6× or 3.2× of it in RSS); returned now, they never do.
		body = nil
		debug.FreeOSMemory()
	}
	return nil
}

// releaseAfterProbe is the largest body from which an import returns its
// probe's memory to the system before publishing: one collection is
// nothing next to reading and sending a body of this size.
const releaseAfterProbe = 8 << 20

// publishing is what m becomes in the import's target, or why it may not
// go there. Both passes call it for every message — the checking pass
// before anything is published, so one refused message refuses the whole
// import — making it the one place for a decision about a message.
func (im *importer) publishing(m *Message) (amqp.Publishing, error) {
	p := m.Publishing
	if im.opts.To == "" {
		if err := im.q.checkImportOrigin(m); err != nil {
			return p, err
		}
	}
	if !im.toDLQ {
		// Out of a dead-letter queue, a message's history must not follow
		// it: the consumer trusts the headers of a delivery from the
		// default exchange, so spent attempts would dead-letter it again
		// on its first failure. Reset exactly as a replay does.
		p = replayPublishing(m, im.q.consumer, im.q.conn.Config.FrameSize)
	}
	if im.opts.ImportID != "" {
		h := make(amqp.Table, len(p.Headers)+1)
		maps.Copy(h, p.Headers) // m's own headers stay as read
		h[HeaderImportID] = im.opts.ImportID
		p.Headers = h
	}
	return p, nil
}

// HeaderImportID names, on a message an import published, the import it
// came from ([ImportOptions].ImportID).
const HeaderImportID = "x-warren-import-id"

// Imported reports whether queue holds a message published by the import
// id ([HeaderImportID]). It reads queue as the dead-letter queue is read:
// nothing is removed, every message is handed back in its place. It cannot
// see messages a consumer already took from queue.
func (q *Queue) Imported(ctx context.Context, queue, id string) (bool, error) {
	target := &Queue{conn: q.conn, name: queue, consumer: q.consumer}
	found := false
	err := target.scan(ctx, 0, &Progress{}, nil, func(_ *amqp.Delivery, m *Message) (bool, error) {
		v, _ := m.Headers[HeaderImportID].(string)
		found = v == id
		return !found, nil
	})
	return found, err
}

// start checks that the target exists and opens the publisher.
func (im *importer) start(ctx context.Context) error {
	im.probe.close() // the checking is over
	if _, err := im.q.depth(ctx, im.target); err != nil {
		return fmt.Errorf("import target: %w", err)
	}
	var err error
	im.pub, err = amqpx.NewPublisher(ctx, im.q.conn, 1)
	return err
}

func (im *importer) close() {
	im.probe.close()
	if im.pub != nil {
		im.pub.Close()
	}
}

// publish publishes m and waits for the broker's confirm; only then does
// it count m done.
func (im *importer) publish(ctx context.Context, m *Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	im.res.Scanned++
	im.res.Matched++
	p, err := im.publishing(m)
	if err != nil {
		return err
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cmp.Or(im.opts.DrainTimeout, DefaultDrainTimeout))
	err = im.pub.Publish(pctx, "", im.target, p)
	cancel()
	if err != nil {
		return err
	}
	im.res.Done++
	if im.res.Queues == nil {
		im.res.Queues = map[string]int{}
	}
	im.res.Queues[im.target]++
	if im.opts.Progress != nil {
		im.opts.Progress(im.res.Progress)
	}
	return nil
}

// ErrForeignOrigin is wrapped by the error of an import, without a target
// queue, of a message whose headers name an origin queue other than the
// one the dead-letter queue belongs to.
var ErrForeignOrigin = errors.New("message names another origin queue")

// checkImportOrigin refuses m for an import into q without a target queue
// named when m's headers say it failed in another consumer's queue. A
// message that names no origin is accepted: it claims nothing.
func (q *Queue) checkImportOrigin(m *Message) error {
	if origin := m.Origin(); origin != "" && !q.isHome(origin) {
		return fmt.Errorf("%w: its headers name %q, and %s belongs to %q; name the target queue (--to) to import it anyway", ErrForeignOrigin, origin, q.name, q.consumer)
	}
	return nil
}
