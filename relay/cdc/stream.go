package cdc

// The stream: the replication connection read into a bounded queue of
// committed outbox rows.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/warrenmq/warren/outbox"
)

// item is one entry of the stream: an event to publish, or the end of a
// transaction (end set, no row), after which the position may move to end.
type item struct {
	row     *outbox.Row
	refetch bool          // read it from the table: a redriven row whose update left a value out, or a row published before
	xid     uint32        // the row's transaction
	commit  pglogrepl.LSN // where the row's transaction commits (its Begin's FinalLSN)
	end     pglogrepl.LSN
}

// queue passes items from the stream's reader to the publisher. It holds
// at most limit rows; the reader waits for room.
type queue struct {
	mu    sync.Mutex
	items []item
	rows  int
	limit int
	ready chan struct{} // signalled when items were added
	room  chan struct{} // signalled when items were taken
}

func newQueue(limit int) *queue {
	return &queue{limit: limit, ready: make(chan struct{}, 1), room: make(chan struct{}, 1)}
}

// push adds it and reports whether the queue is now full.
func (q *queue) push(it item) bool {
	q.mu.Lock()
	// Two ends in a row are one: the later is where the position may
	// move. Keepalives and other tables' transactions come while the
	// publisher is held up, and must not grow the queue without bound.
	if n := len(q.items); it.row == nil && n > 0 && q.items[n-1].row == nil {
		q.items[n-1].end = max(q.items[n-1].end, it.end)
	} else {
		q.items = append(q.items, it)
	}
	if it.row != nil {
		q.rows++
	}
	full := q.rows >= q.limit
	q.mu.Unlock()
	signal(q.ready)
	return full
}

// take removes the items before the (max+1)th row.
func (q *queue) take(max int) []item {
	q.mu.Lock()
	defer q.mu.Unlock()
	n, rows := 0, 0
	for n < len(q.items) && (q.items[n].row == nil || rows < max) {
		if q.items[n].row != nil {
			rows++
		}
		n++
	}
	out := append([]item(nil), q.items[:n]...)
	q.items = append(q.items[:0], q.items[n:]...)
	q.rows -= rows
	if n > 0 {
		signal(q.room)
	}
	if len(q.items) > 0 {
		signal(q.ready)
	}
	return out
}

func (q *queue) full() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.rows >= q.limit
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// read receives the stream, decodes the outbox table's inserts and
// redrives into the queue, and tells Postgres the flushed position every
// StatusInterval and whenever it asks. It alone uses conn.
func (r *Relay) read(ctx context.Context, conn *pgconn.PgConn, q *queue) error {
	rd := &reader{r: r, conn: conn, q: q, types: pgtype.NewMap(), relations: map[uint32]*pglogrepl.RelationMessage{},
		nextStatus: time.Now(), heard: time.Now()}
	// Every status sent is the heartbeat /healthz reads: the reader sends
	// one at least every StatusInterval, whatever it waits on.
	defer r.health.beat.Store(0)
	for {
		if !time.Now().Before(rd.nextStatus) {
			if err := rd.sendStatus(ctx); err != nil {
				return err
			}
		}
		if err := rd.waitForRoom(ctx); err != nil {
			return err
		}
		if time.Since(rd.heard) > silenceLimit {
			return fmt.Errorf("no word from the server for %v, though asked for a reply", silenceLimit)
		}
		data, err := rd.receive(ctx)
		if err != nil {
			return err
		}
		if len(data) > 0 {
			if err := rd.handle(data); err != nil {
				return err
			}
		}
	}
}

// reader is one session's reading of the stream (read).
type reader struct {
	r         *Relay
	conn      *pgconn.PgConn
	q         *queue
	types     *pgtype.Map
	relations map[uint32]*pglogrepl.RelationMessage

	inTransaction bool
	xid           uint32        // the transaction being read
	commit        pglogrepl.LSN // and where it commits
	pushed        pglogrepl.LSN // the last end pushed

	nextStatus time.Time
	// heard is when the server last said anything while the reader
	// listened. A server gone without a reset (a partition, a frozen VM)
	// only makes reads time out, and an idle one may say nothing: after
	// a silence the status asks for a reply, and a longer one ends the
	// session, as Postgres's own wal_receiver_timeout does.
	heard time.Time
}

// sendStatus tells the server the flushed position.
func (rd *reader) sendStatus(ctx context.Context) error {
	rd.nextStatus = time.Now().Add(rd.r.cfg.StatusInterval)
	pos := pglogrepl.LSN(rd.r.flushed.Load())
	// pglogrepl ignores the context of a send: a deadline on the socket
	// keeps a server that stopped reading from blocking the reader, and
	// with it a stop.
	rd.conn.Conn().SetWriteDeadline(time.Now().Add(statusWriteTimeout))
	err := pglogrepl.SendStandbyStatusUpdate(ctx, rd.conn, pglogrepl.StandbyStatusUpdate{
		WALWritePosition: pos, ReplyRequested: time.Since(rd.heard) > silenceLimit/3})
	rd.conn.Conn().SetWriteDeadline(time.Time{})
	if err != nil {
		return fmt.Errorf("send standby status: %w", err)
	}
	rd.r.health.stamp()
	return nil
}

// waitForRoom returns once the queue has room. A full queue is not read
// from: the walsender waits on its socket, and the status updates keep
// the connection alive.
func (rd *reader) waitForRoom(ctx context.Context) error {
	for rd.q.full() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-rd.q.room:
			rd.heard = time.Now() // not listening is not silence
		case <-time.After(time.Until(rd.nextStatus)):
			if err := rd.sendStatus(ctx); err != nil {
				return err
			}
		}
	}
	return nil
}

// receive waits until the next status is due for a message from the
// server, and returns its CopyData payload: nil when the wait ended
// without one, or the message was of another kind.
func (rd *reader) receive(ctx context.Context) ([]byte, error) {
	rctx, cancel := context.WithDeadline(ctx, rd.nextStatus)
	msg, err := rd.conn.ReceiveMessage(rctx)
	cancel()
	if err == nil {
		rd.heard = time.Now()
	}
	switch {
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case err != nil && pgconn.Timeout(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("receive from slot: %w", err)
	}
	switch m := msg.(type) {
	case *pgproto3.CopyData:
		return m.Data, nil
	case *pgproto3.ErrorResponse:
		return nil, pgconn.ErrorResponseToPgError(m)
	}
	return nil, nil
}

// handle reads one message of the stream: a keepalive, or WAL data (a
// relation, a transaction's begin and commit, an insert or update).
func (rd *reader) handle(data []byte) error {
	switch data[0] {
	case pglogrepl.PrimaryKeepaliveMessageByteID:
		ka, err := pglogrepl.ParsePrimaryKeepaliveMessage(data[1:])
		if err != nil {
			return err
		}
		// Everything that committed before ServerWALEnd has been sent,
		// and read above; with no transaction open, the position may
		// follow the server once the queue before this marker is
		// settled. Without it a quiet outbox would keep the WAL of every
		// other table's writes.
		if !rd.inTransaction && ka.ServerWALEnd > rd.pushed {
			rd.q.push(item{end: ka.ServerWALEnd})
			rd.pushed = ka.ServerWALEnd
		}
		if ka.ReplyRequested {
			rd.nextStatus = time.Time{}
		}
	case pglogrepl.XLogDataByteID:
		xld, err := pglogrepl.ParseXLogData(data[1:])
		if err != nil {
			return err
		}
		lm, err := pglogrepl.Parse(xld.WALData)
		if err != nil {
			return fmt.Errorf("decode the stream: %w", err)
		}
		switch m := lm.(type) {
		case *pglogrepl.RelationMessage:
			rd.relations[m.RelationID] = m
		case *pglogrepl.BeginMessage:
			rd.inTransaction, rd.xid, rd.commit = true, m.Xid, m.FinalLSN
		case *pglogrepl.InsertMessage:
			rd.r.queueRow(rd.types, rd.relations[m.RelationID], m.Tuple, item{xid: rd.xid, commit: rd.commit}, rd.q)
		case *pglogrepl.UpdateMessage:
			rd.r.queueRow(rd.types, rd.relations[m.RelationID], m.NewTuple, item{xid: rd.xid, commit: rd.commit}, rd.q)
		case *pglogrepl.CommitMessage:
			rd.inTransaction = false
			rd.q.push(item{end: m.TransactionEndLSN})
			rd.pushed = m.TransactionEndLSN
		}
	}
	return nil
}

// queueRow queues a pending row of the outbox table, of the transaction
// in it. Rows in any other state (the relay's own dead marks, a redrive's)
// are not events to send.
func (r *Relay) queueRow(types *pgtype.Map, rel *pglogrepl.RelationMessage, tuple *pglogrepl.TupleData, it item, q *queue) {
	if rel == nil || rel.RelationName != r.cfg.Table {
		return
	}
	row, err := decodeTuple(types, rel, tuple)
	refetch := errors.Is(err, errUnchangedToast)
	if err != nil && !refetch {
		// Nothing identifies the row to mark it dead; it stays pending
		// in the table, where stats show its age and a polling relay
		// can send it. The schema makes this unreachable.
		r.log.Error("an outbox row in the stream cannot be read; it stays in the table", "error", err)
		return
	}
	if row.State != "" && row.State != outbox.Pending {
		return
	}
	it.row, it.refetch = &row, refetch
	q.push(it)
}
