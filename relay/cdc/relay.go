package cdc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/internal/amqpx"
	"github.com/warrenmq/warren/internal/redact"
	"github.com/warrenmq/warren/internal/tracecontext"
	"github.com/warrenmq/warren/outbox"
)

// Relay streams an outbox table's inserts from Postgres's write-ahead log
// to RabbitMQ. See the package documentation for what it guarantees.
type Relay struct {
	cfg        Config
	pool       *pgxpool.Pool
	poolConfig *pgxpool.Config // for the relay's own pool, when Config.Pool is nil
	repl       *pgconn.Config
	log        *slog.Logger
	enc        warren.Encoder

	// flushed is the position before which every event is confirmed by
	// the broker and trimmed from the table (or marked dead): what the
	// relay reports to Postgres, and where a restart resumes.
	flushed atomic.Uint64

	published, dead atomic.Int64
	streaming       atomic.Bool
	health          healthState
	// nacks: since when the current session's verdicts have all been
	// nacks; nackedSince: since when each nacked event has been (see
	// confirm), kept over a session that ended on a nack streak
	// (endedOnNacks), cleared at any other session's start. Sessions run
	// one at a time, on Run's goroutine.
	nacks        amqpx.NackStreak
	nackedSince  nackLedger
	endedOnNacks bool
	// brokerLetIn: a session has logged in to the broker. A refusal
	// after that (a password rotated under the relay, an auth backend
	// failing) is retried; before it, the configuration is wrong.
	brokerLetIn bool
}

// errNackStreak ends a session whose every verdict has been a nack for
// amqpx.NackedSessionLimit.
var errNackStreak = errors.New("every publish nacked to one destination, none confirmed")

// New checks cfg and prepares a relay; it connects to nothing.
func New(cfg Config) (*Relay, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	r := &Relay{cfg: cfg, pool: cfg.Pool, log: cfg.Logger.With("relay", cfg.Name, "slot", cfg.Slot),
		enc: warren.Encoder{Format: cfg.Format, Publisher: cfg.Publisher}}
	dsn := cfg.DatabaseURL
	if dsn == "" {
		dsn = cfg.Pool.Config().ConnString()
	}
	// Parsed as a pool's config so that pgxpool's and pgx's own keys
	// (pool_max_conns, default_query_exec_mode, …) are taken out: sent as
	// startup parameters, the server would refuse the connection.
	parsed, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("%w: DatabaseURL: %s", ErrInvalidConfig, redact.Error(err))
	}
	repl := parsed.ConnConfig.Config.Copy()
	// The stream's timestamps arrive as text in the session's DateStyle,
	// which decodeTuple reads as ISO.
	repl.RuntimeParams["replication"] = "database"
	repl.RuntimeParams["DateStyle"] = "ISO, MDY"
	repl.RuntimeParams["application_name"] = cfg.Name
	r.repl = repl
	if r.pool == nil {
		if r.poolConfig, err = pgxpool.ParseConfig(dsn); err != nil {
			return nil, fmt.Errorf("%w: DatabaseURL: %s", ErrInvalidConfig, redact.Error(err))
		}
		r.poolConfig.ConnConfig.RuntimeParams["application_name"] = cfg.Name
		r.poolConfig.MaxConns = 4
	}
	return r, nil
}

// Published is how many events this relay has had confirmed by the broker.
func (r *Relay) Published() int64 { return r.published.Load() }

// Dead is how many events this relay has made dead.
func (r *Relay) Dead() int64 { return r.dead.Load() }

// Streaming reports whether the relay holds the slot now.
func (r *Relay) Streaming() bool { return r.streaming.Load() }

// Table is the outbox table the relay streams.
func (r *Relay) Table() string { return r.cfg.Table }

// Slot is the replication slot of the relay's group.
func (r *Relay) Slot() string { return r.cfg.Slot }

// Run streams until ctx ends, then returns nil. A lost connection, to
// Postgres or to the broker, ends a session; the next one resumes from
// the last flushed position, so what was published and not yet flushed is
// published again. While another relay streams the slot, Run stands by
// and tries again every StandbyRetry. It returns an error only for what
// waiting cannot mend: a server whose wal_level is not logical, a missing
// outbox table ([ErrNoTable]), an outbox or state table that is not
// logged ([ErrNotLogged]), a publication that does not publish it
// ([ErrNotPublished]), another relay group on the table
// ([ErrOtherGroup]), or a broker that refused the credentials or
// the vhost of AMQPURL before it ever let the relay in (refused later, the
// relay keeps trying and logs an error).
func (r *Relay) Run(ctx context.Context) error {
	r.health.setRole(RoleStarting)
	defer r.health.setRole(RoleStopped)
	if r.poolConfig != nil {
		pool, err := pgxpool.NewWithConfig(ctx, r.poolConfig)
		if err != nil {
			return err
		}
		defer pool.Close()
		r.pool = pool
	}
	// Which broker and database, said once: with several environments a
	// relay that does not say where it publishes misleads.
	r.log.Info("cdc relay started", "amqp_url", amqpx.RedactURLs(r.cfg.AMQPURL), "database_url", redact.URL(r.cfg.DatabaseURL),
		"table", r.cfg.Table)
	standingBy := false
	wait := r.cfg.StandbyRetry
	for {
		began := time.Now()
		err := r.session(ctx)
		if ctx.Err() == nil {
			r.health.sessionEnded(err)
		}
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, ErrWALLevel), errors.Is(err, ErrNoTable), errors.Is(err, ErrNotPublished), errors.Is(err, ErrOtherGroup), errors.Is(err, ErrNotLogged),
			errors.Is(err, amqpx.ErrRefused) && !r.brokerLetIn:
			return err
		case errors.Is(err, amqpx.ErrRefused):
			standingBy = false
			r.log.Error("the broker refuses the relay it let in before; will start again", "error", err, "retry_in", wait)
		case isSlotBusy(err):
			if !standingBy {
				r.log.Info("another relay streams the slot; standing by", "error", err)
				standingBy = true
			}
			wait = r.cfg.StandbyRetry
		default:
			standingBy = false
			if time.Since(began) > time.Minute {
				wait = r.cfg.StandbyRetry
			}
			r.log.Warn("stream ended; will start again", "error", err, "retry_in", wait)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		if !isSlotBusy(err) {
			wait = min(2*wait, maxSessionRetry)
		}
	}
}

func isSlotBusy(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == sqlObjectInUse
}

// session streams the slot until something fails or ctx ends. Four
// goroutines pass the events along, each in stream order: read decodes
// the stream into a queue, publishLoop publishes it a batch at a time, up
// to BatchesInFlight batches ahead of their confirms, confirmLoop awaits
// the confirms, and settleLoop trims the confirmed rows and only then
// moves the position Postgres is told.
func (r *Relay) session(ctx context.Context) error {
	if !r.endedOnNacks {
		r.nackedSince.clear()
	}
	r.endedOnNacks = false
	st, err := r.setup(ctx)
	if err != nil {
		return err
	}
	conn, err := pgconn.ConnectConfig(ctx, r.repl)
	if err != nil {
		return fmt.Errorf("replication connection: %s", redact.Error(err))
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		conn.Close(cctx)
	}()
	start, err := r.confirmedFlush(ctx)
	if err != nil {
		return err
	}
	err = pglogrepl.StartReplication(ctx, conn, r.cfg.Slot, start, pglogrepl.StartReplicationOptions{
		PluginArgs: []string{"proto_version '1'", "publication_names '" + r.cfg.Publication + "'"},
	})
	if err != nil {
		return fmt.Errorf("start streaming slot %s: %w", r.cfg.Slot, err)
	}
	r.flushed.Store(uint64(start))
	r.nacks.Reset()
	amqpConn, err := amqpx.Dial(ctx, r.cfg.AMQPURL, amqpx.DialOptions{Name: r.cfg.Name})
	if err != nil {
		return err
	}
	r.brokerLetIn = true
	// A broker that stops answering (an alarm) must not hold a stop:
	// the close and the declare are bounded, closing the connection
	// under them when they overrun.
	defer amqpx.CloseConnection(amqpConn, amqpx.CloseTimeout)
	dctx, dcancel := context.WithTimeout(ctx, amqpx.SetupTimeout)
	err = amqpx.Bound(dctx, amqpConn, func() error { return amqpx.DeclareFanout(amqpConn, r.cfg.Exchange) })
	dcancel()
	if err != nil {
		return err
	}
	// Room for every batch in flight and the retries of one: confirm
	// publishes a refused event's retry, and waits for it, before the
	// batches sent after its batch are waited for (Send's rule is to wait
	// in the order sent); their slots stay taken meanwhile, and the extra
	// batch of slots is what lets the retry be sent.
	pub, err := amqpx.NewPublisher(ctx, amqpConn, (r.cfg.BatchesInFlight+1)*r.cfg.BatchSize)
	if err != nil {
		return err
	}
	defer pub.Close()
	r.streaming.Store(true)
	defer r.streaming.Store(false)
	r.log.Info("streaming", "from", start, "backfill", st.backfill, "settled", st.settled)

	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	q := newQueue(4 * r.cfg.BatchSize)
	p := pipeline{sent: make(chan *inFlight, r.cfg.BatchesInFlight), room: make(chan struct{}, r.cfg.BatchesInFlight)}
	settles := make(chan settlement, settleQueue)
	var wg sync.WaitGroup
	wg.Go(func() { cancel(r.read(sctx, conn, q)) })
	wg.Go(func() {
		defer close(p.sent)
		cancel(r.publishLoop(sctx, pub, q, p, st))
	})
	wg.Go(func() {
		defer close(settles)
		r.confirmLoop(sctx, pub, p, settles, cancel)
	})
	wg.Go(func() { r.settleLoop(sctx, settles, cancel) })
	select {
	case <-sctx.Done():
	case e := <-pub.NotifyClose():
		cancel(fmt.Errorf("broker closed the publish channel: %v", e))
	}
	wg.Wait()
	r.endedOnNacks = errors.Is(context.Cause(sctx), errNackStreak)
	// The batch in flight when the session ended was settled; telling
	// Postgres now spares the next relay publishing it again. Best effort:
	// a position not reported is only a duplicate later.
	conn.Conn().SetWriteDeadline(time.Now().Add(2 * time.Second))
	pglogrepl.SendStandbyStatusUpdate(ctx, conn, pglogrepl.StandbyStatusUpdate{WALWritePosition: pglogrepl.LSN(r.flushed.Load())})
	return context.Cause(sctx)
}

// confirmedFlush reads the slot's flushed position: where the stream
// resumes.
func (r *Relay) confirmedFlush(ctx context.Context) (pglogrepl.LSN, error) {
	var lsn *string
	err := r.pool.QueryRow(ctx, `SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1`, r.cfg.Slot).Scan(&lsn)
	if err != nil || lsn == nil {
		return 0, fmt.Errorf("read the position of slot %s: %v", r.cfg.Slot, err)
	}
	return pglogrepl.ParseLSN(*lsn)
}

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
	types := pgtype.NewMap()
	relations := map[uint32]*pglogrepl.RelationMessage{}
	inTransaction := false
	var xid uint32           // the transaction being read
	var commit pglogrepl.LSN // and where it commits
	var pushed pglogrepl.LSN // the last end pushed
	nextStatus := time.Now()
	// Every status sent is the heartbeat /healthz reads: the reader sends
	// one at least every StatusInterval, whatever it waits on.
	defer r.health.beat.Store(0)
	// heard is when the server last said anything while the reader
	// listened. A server gone without a reset (a partition, a frozen VM)
	// only makes reads time out, and an idle one may say nothing: after
	// a silence the status asks for a reply, and a longer one ends the
	// session, as Postgres's own wal_receiver_timeout does.
	heard := time.Now()
	sendStatus := func() error {
		nextStatus = time.Now().Add(r.cfg.StatusInterval)
		pos := pglogrepl.LSN(r.flushed.Load())
		// pglogrepl ignores the context of a send: a deadline on the
		// socket keeps a server that stopped reading from blocking the
		// reader, and with it a stop.
		conn.Conn().SetWriteDeadline(time.Now().Add(statusWriteTimeout))
		err := pglogrepl.SendStandbyStatusUpdate(ctx, conn, pglogrepl.StandbyStatusUpdate{
			WALWritePosition: pos, ReplyRequested: time.Since(heard) > silenceLimit/3})
		conn.Conn().SetWriteDeadline(time.Time{})
		if err == nil {
			r.health.stamp()
		}
		return err
	}
	for {
		if !time.Now().Before(nextStatus) {
			if err := sendStatus(); err != nil {
				return fmt.Errorf("send standby status: %w", err)
			}
		}
		// A full queue is not read from: the walsender waits on its
		// socket, and the status updates keep the connection alive.
		for q.full() {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-q.room:
				heard = time.Now() // not listening is not silence
			case <-time.After(time.Until(nextStatus)):
				if err := sendStatus(); err != nil {
					return fmt.Errorf("send standby status: %w", err)
				}
			}
		}
		if time.Since(heard) > silenceLimit {
			return fmt.Errorf("no word from the server for %v, though asked for a reply", silenceLimit)
		}
		rctx, cancel := context.WithDeadline(ctx, nextStatus)
		msg, err := conn.ReceiveMessage(rctx)
		cancel()
		if err == nil {
			heard = time.Now()
		}
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case err != nil && pgconn.Timeout(err):
			continue
		case err != nil:
			return fmt.Errorf("receive from slot: %w", err)
		}
		var data []byte
		switch m := msg.(type) {
		case *pgproto3.CopyData:
			data = m.Data
		case *pgproto3.ErrorResponse:
			return pgconn.ErrorResponseToPgError(m)
		default:
			continue
		}
		if len(data) == 0 {
			continue
		}
		switch data[0] {
		case pglogrepl.PrimaryKeepaliveMessageByteID:
			ka, err := pglogrepl.ParsePrimaryKeepaliveMessage(data[1:])
			if err != nil {
				return err
			}
			// Everything that committed before ServerWALEnd has been
			// sent, and read above; with no transaction open, the
			// position may follow the server once the queue before
			// this marker is settled. Without it a quiet outbox would
			// keep the WAL of every other table's writes.
			if !inTransaction && ka.ServerWALEnd > pushed {
				q.push(item{end: ka.ServerWALEnd})
				pushed = ka.ServerWALEnd
			}
			if ka.ReplyRequested {
				nextStatus = time.Time{}
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
				relations[m.RelationID] = m
			case *pglogrepl.BeginMessage:
				inTransaction, xid, commit = true, m.Xid, m.FinalLSN
			case *pglogrepl.InsertMessage:
				r.queueRow(types, relations[m.RelationID], m.Tuple, item{xid: xid, commit: commit}, q)
			case *pglogrepl.UpdateMessage:
				r.queueRow(types, relations[m.RelationID], m.NewTuple, item{xid: xid, commit: commit}, q)
			case *pglogrepl.CommitMessage:
				inTransaction = false
				q.push(item{end: m.TransactionEndLSN})
				pushed = m.TransactionEndLSN
			}
		}
	}
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

// settlement is what a batch's publish decided: the rows to trim, the rows
// to mark dead, the position the batch moves the slot to (0 for none), and
// the commit of the latest transaction its rows belong to (0 for the
// backfill's), recorded with the trim.
type settlement struct {
	done   []int64
	dead   []deadRow
	end    pglogrepl.LSN
	commit pglogrepl.LSN
}

type deadRow struct {
	id       int64
	attempts int
	reason   string
}

// publishLoop publishes the rows written before the slot existed, if
// they may not have been, and then the queue, a batch at a time, up to
// BatchesInFlight batches ahead of their confirms; confirmLoop awaits
// them, in the same order. Every batch sent is passed on, even in a stop:
// confirmLoop reads sent until it is closed, and a batch must be waited
// for to free its in-flight slots.
func (r *Relay) publishLoop(ctx context.Context, pub *amqpx.Publisher, q *queue, p pipeline, st slotState) error {
	// A streamed row may have been published, and trimmed, before this
	// session: it is read from the table instead, and published only if
	// it is still pending (the trim, committed after the broker's
	// confirm, is the record that it was published). Two kinds:
	//  - at or below the backfill's bound, recorded by this session's
	//    backfill or an earlier one's, a row that committed after the
	//    slot was made and that the backfill read too;
	//  - of a transaction at or before st.settled, the latest whose rows
	//    an earlier session trimmed: the slot moves only past whole
	//    transactions, so a session that ended inside one leaves it to be
	//    streamed again whole, and without this every row of it already
	//    published went out again, and a transaction longer than the
	//    sessions last was never passed.
	// Every other row (every row of a transaction no session settled
	// any of) is published as the stream has it, with no read.
	backfilled := st.backfilledTo
	if st.backfill {
		bound, err := r.backfill(ctx, pub)
		if err != nil {
			return fmt.Errorf("backfill: %w", err)
		}
		backfilled = max(backfilled, bound)
	}
	for {
		// Room first, then the queue: a batch taken after waiting for
		// room holds what the stream delivered meanwhile.
		select {
		case <-ctx.Done():
			return ctx.Err()
		case p.room <- struct{}{}:
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-q.ready:
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		items := q.take(r.cfg.BatchSize)
		if len(items) == 0 {
			<-p.room // the room taken for a batch that is not there
			continue
		}
		rows := make([]outbox.Row, 0, len(items))
		var err error
		var refetch, xids []int64
		var end, commit pglogrepl.LSN
		for i := range items {
			if items[i].row != nil && (items[i].row.ID <= backfilled || items[i].commit <= st.settled) {
				items[i].refetch = true
			}
			it := items[i]
			if it.row != nil && (len(xids) == 0 || xids[len(xids)-1] != int64(it.xid)) {
				xids = append(xids, int64(it.xid))
				commit = it.commit
			}
			switch {
			case it.row == nil:
				end = it.end
			case it.refetch:
				refetch = append(refetch, it.row.ID)
			default:
				rows = append(rows, *it.row)
			}
		}
		if err := r.waitVisible(ctx, xids); err != nil {
			return err
		}
		if len(refetch) > 0 {
			if rows, err = r.refetched(ctx, items, rows, refetch); err != nil {
				return err
			}
		}
		f := r.send(ctx, pub, rows)
		f.end, f.commit = end, commit
		p.sent <- f // never waits: room was taken for it
	}
}

// pipeline carries the batches publishLoop sent to confirmLoop, in order.
// room holds a token for each batch sent and not yet queued for its
// settle, so that at most BatchesInFlight are.
type pipeline struct {
	sent chan *inFlight
	room chan struct{}
}

// confirmLoop awaits the verdicts of the batches publishLoop sent, in
// order, and passes each one's settlement on, so that the position moves
// only past batches whose every event was confirmed or made dead. After a
// batch fails for the connection's sake, the batches behind it are not
// settled (their rows are published again from the last position): their
// contexts end at once and their verdicts are only drained. A stop that
// comes while a batch waits to publish a refused event again fails that
// batch the same way, so the batches behind it, though confirmed, are
// published again by the next relay: the position could not have moved
// past them anyway.
func (r *Relay) confirmLoop(ctx context.Context, pub *amqpx.Publisher, p pipeline, settles chan<- settlement, fail context.CancelCauseFunc) {
	failed := false
	for f := range p.sent {
		if failed {
			f.cancel()
			f.batch.Wait(func(int, error) {})
			<-p.room
			continue
		}
		s, err := r.confirm(ctx, pub, f)
		if err != nil {
			failed = true
			fail(err)
			<-p.room
			continue
		}
		// The settle loop runs until settles is closed, so this send
		// cannot be left waiting by a stop. The batch's room is freed
		// only once it is queued for its settle, which bounds what is
		// published and not settled.
		settles <- s
		<-p.room
	}
}

// waitVisible waits until none of the transactions xids is running in
// the eyes of a new snapshot. The stream delivers a transaction as soon
// as its commit record is flushed, a moment before the committing backend
// makes it visible to other snapshots (on a busy server, milliseconds):
// a settle in that moment would not see its rows, delete none of them,
// and still move the slot past them, leaving published rows pending in
// the table for ever (the kill test found it, without a kill: a few
// transactions in a thousand on a busy machine); a redrive's refetch
// would not see the row pending and skip it. Publishing only what is
// visible also means that a consumer reading the database when the event
// arrives sees the change it describes.
func (r *Relay) waitVisible(ctx context.Context, xids []int64) error {
	wait := time.Millisecond
	for len(xids) > 0 {
		var running int
		err := r.pool.QueryRow(ctx, visibleSQL, xids).Scan(&running)
		if err != nil {
			return fmt.Errorf("wait for the stream's transactions to be visible: %w", err)
		}
		if running == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, 50*time.Millisecond)
	}
	return nil
}

// visibleSQL counts the transactions of $1 that a new snapshot would not
// see yet. The stream gives 32-bit xids and snapshots hold 64-bit ones: an
// xid is widened to the 64-bit value nearest the snapshot's xmax (the
// stream's transactions are recent, far less than 2^31 from it). A
// transaction that committed but is not visible yet may be the newest, at
// or above xmax and so in no list of running ones; pg_visible_in_snapshot
// counts it as not visible, as the trim's snapshot would.
const visibleSQL = `WITH s AS (SELECT pg_current_snapshot() AS snap, pg_snapshot_xmax(pg_current_snapshot())::text::bigint AS xmax)
	SELECT count(*) FROM s, unnest($1::bigint[]) AS t(xid),
		LATERAL (SELECT s.xmax - s.xmax % 4294967296 + t.xid AS x) AS w
	WHERE NOT pg_visible_in_snapshot((CASE
		WHEN w.x - s.xmax > 2147483648 THEN w.x - 4294967296
		WHEN s.xmax - w.x > 2147483648 THEN w.x + 4294967296
		ELSE w.x END)::text::xid8, s.snap)`

// backfill publishes the table's pending rows up to its bound (see
// boundBackfill), which a new slot does not stream if they committed
// before it, records that it has, and returns the bound. Rows that
// committed after the slot and are at or below the bound are in the
// stream as well; publishLoop reads those from the table rather than
// publishing them again. It settles each page itself, before the record:
// a dead mark must not wait for a stream position, and the stream's
// check of a row relies on the backfill's rows being trimmed.
func (r *Relay) backfill(ctx context.Context, pub *amqpx.Publisher) (int64, error) {
	bound, err := r.boundBackfill(ctx)
	if err != nil {
		return 0, err
	}
	var after int64
	for {
		var rows []outbox.Row
		err := pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) (err error) {
			if _, err = tx.Exec(ctx, backfillPlanSQL); err == nil {
				rows, err = queryRows(ctx, tx, backfillPageSQL(pgx.Identifier{r.cfg.Table}.Sanitize()), after, bound, r.cfg.BatchSize)
			}
			return err
		})
		if err != nil || len(rows) == 0 {
			if err == nil {
				err = r.markBackfilled(ctx)
			}
			return bound, err
		}
		after = rows[len(rows)-1].ID
		s, err := r.deliver(ctx, pub, rows)
		if err != nil {
			return bound, err
		}
		if err := r.settle(ctx, s); err != nil {
			return bound, err
		}
	}
}

// refetched reads the rows of ids from the table and returns the batch's
// rows in stream order, each read row in its item's place; a row no
// longer pending is left out.
func (r *Relay) refetched(ctx context.Context, items []item, decoded []outbox.Row, ids []int64) ([]outbox.Row, error) {
	read, err := r.pendingRows(ctx, ids)
	if err != nil {
		return nil, err
	}
	byID := make(map[int64]outbox.Row, len(read))
	for _, row := range read {
		byID[row.ID] = row
	}
	out := make([]outbox.Row, 0, len(decoded)+len(read))
	for _, it := range items {
		switch {
		case it.row == nil:
		case !it.refetch:
			out = append(out, decoded[0])
			decoded = decoded[1:]
		default:
			if row, ok := byID[it.row.ID]; ok {
				out = append(out, row)
			}
		}
	}
	return out, nil
}

// pendingRows reads the rows of ids that are still pending.
func (r *Relay) pendingRows(ctx context.Context, ids []int64) ([]outbox.Row, error) {
	return queryRows(ctx, r.pool, pendingRowsSQL(pgx.Identifier{r.cfg.Table}.Sanitize()), ids)
}

func queryRows(ctx context.Context, db interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, sql string, args ...any) ([]outbox.Row, error) {
	rs, err := db.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	var out []outbox.Row
	for rs.Next() {
		row, err := outbox.ScanRow(rs)
		if err != nil {
			return nil, err
		}
		out = append(out, row)
	}
	return out, rs.Err()
}

// inFlight is a batch handed to the broker whose verdicts are awaited.
type inFlight struct {
	batch  *amqpx.Batch
	cancel context.CancelFunc // ends the batch's context
	out    []amqpx.Outgoing
	ids    []int64
	dead   []deadRow     // the rows that could not be encoded
	end    pglogrepl.LSN // where the position may move once the batch is settled
	commit pglogrepl.LSN // the commit of the latest transaction of its rows
}

// deliver publishes rows in order and waits for every verdict: send and
// confirm, for the backfill, which settles a page before it reads the next.
func (r *Relay) deliver(ctx context.Context, pub *amqpx.Publisher, rows []outbox.Row) (settlement, error) {
	return r.confirm(ctx, pub, r.send(ctx, pub, rows))
}

// send encodes rows and starts publishing them, after every batch sent
// before on pub; one that cannot be encoded is dead at once. A batch that
// started is not cut short by a stop: it runs to its verdicts (or
// PublishTimeout, counted by confirm), so that it can be settled and the
// next relay need not publish it again.
func (r *Relay) send(ctx context.Context, pub *amqpx.Publisher, rows []outbox.Row) *inFlight {
	f := &inFlight{out: make([]amqpx.Outgoing, 0, len(rows)), ids: make([]int64, 0, len(rows))}
	for _, row := range rows {
		msg, err := r.encode(row)
		if err != nil {
			f.dead = append(f.dead, deadRow{row.ID, 1, err.Error()})
			continue
		}
		f.out = append(f.out, amqpx.Outgoing{RoutingKey: row.Event.Type, Msg: msg})
		f.ids = append(f.ids, row.ID)
	}
	bctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	f.batch, f.cancel = pub.Send(bctx, r.cfg.Exchange, f.out), cancel
	return f
}

// confirm waits for the verdicts of f, for at most PublishTimeout from
// when it starts waiting: the time f spent behind the batches before it
// is theirs. A row the broker refuses is published again, the batch
// waiting, until it is confirmed or dead; the batches sent after f are
// not held up, so the refused row arrives after them. A return (no queue
// bound for it) spends one of the row's MaxAttempts. A nack spends none:
// RabbitMQ nacks mostly for its own passing state (a full queue that
// rejects publishes, a quorum queue without a leader), so a nacked row
// is dead only once it has been nacked for NackTimeout, across sessions.
// When every verdict of the session has been a nack for
// amqpx.NackedSessionLimit the session ends, and the next one publishes
// on a new channel (a channel that first published to a quorum queue
// during its leader's election stays refused). A publish that fails for
// the connection's sake (closed channel, no confirm within
// PublishTimeout) fails the session too: the rows are published again
// from the last position, and no attempt is spent on them.
func (r *Relay) confirm(ctx context.Context, pub *amqpx.Publisher, f *inFlight) (settlement, error) {
	s := settlement{dead: f.dead, end: f.end, commit: f.commit}
	batch, cancel, out, ids := f.batch, f.cancel, f.out, f.ids
	returns := make([]int, len(out)) // the returns each row has had
	wait := r.cfg.RetryMin
	for {
		var failedOut []amqpx.Outgoing
		var failedIDs []int64
		var failedReturns []int
		var sessionErr error
		retry := func(i, returned int) {
			failedOut, failedIDs, failedReturns = append(failedOut, out[i]), append(failedIDs, ids[i]), append(failedReturns, returned)
		}
		expire := time.AfterFunc(r.cfg.PublishTimeout, cancel)
		batch.Wait(func(i int, err error) {
			switch {
			case err == nil:
				s.done = append(s.done, ids[i])
				r.published.Add(1)
				r.nackedSince.forget(ids[i])
				r.nacks.Record(amqpx.Destination(r.cfg.Exchange, out[i].RoutingKey), false, time.Now())
			case errors.Is(err, amqpx.ErrUnroutable):
				if returns[i]+1 >= r.cfg.MaxAttempts {
					s.dead = append(s.dead, deadRow{ids[i], returns[i] + 1, err.Error()})
					return
				}
				retry(i, returns[i]+1)
			case errors.Is(err, amqpx.ErrNacked):
				now := time.Now()
				r.nacks.Record(amqpx.Destination(r.cfg.Exchange, out[i].RoutingKey), true, now)
				if first := r.nackedSince.nacked(ids[i], now, r.cfg.NackTimeout); now.Sub(first) >= r.cfg.NackTimeout {
					s.dead = append(s.dead, deadRow{ids[i], returns[i] + 1, fmt.Sprintf("%v, for %v (NackTimeout)", err, now.Sub(first).Round(time.Millisecond))})
					return
				}
				retry(i, returns[i])
			case sessionErr == nil:
				sessionErr = err
			}
		})
		expire.Stop()
		cancel()
		if sessionErr != nil {
			return s, sessionErr
		}
		if len(failedOut) == 0 {
			return s, nil
		}
		if d, stale := r.nacks.Stale(time.Now(), amqpx.NackedSessionLimit); stale {
			return s, fmt.Errorf("%w, for %v: a new session (a channel that first published to a quorum queue during its leader election stays refused)", errNackStreak, d.Round(time.Millisecond))
		}
		r.log.Warn("the broker refused events; publishing them again", "events", len(failedOut), "retry_in", wait)
		select {
		case <-ctx.Done():
			return s, ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, r.cfg.RetryMax)
		out, ids, returns = failedOut, failedIDs, failedReturns
		bctx, bcancel := context.WithCancel(context.WithoutCancel(ctx))
		batch, cancel = pub.Send(bctx, r.cfg.Exchange, out), bcancel
	}
}

// encode builds the message; an error means no attempt can succeed.
func (r *Relay) encode(row outbox.Row) (amqp.Publishing, error) {
	if row.DecodeErr != nil {
		return amqp.Publishing{}, row.DecodeErr
	}
	msg, err := amqpx.EncodedPublishing(r.enc, row.Event, row.ID)
	if err != nil {
		return amqp.Publishing{}, err
	}
	if len(msg.Body) > r.cfg.MaxMessageBytes {
		return amqp.Publishing{}, fmt.Errorf("encoded event is %d bytes, more than MaxMessageBytes (%d)", len(msg.Body), r.cfg.MaxMessageBytes)
	}
	msg.Headers = tracecontext.Inject(msg.Headers, row.TraceParent, row.TraceState)
	// A tracestate written by SQL may be any size: over frame_max it
	// would close the connection in every session, the same row first.
	if err := amqpx.CheckContentHeader(msg); err != nil {
		return amqp.Publishing{}, fmt.Errorf("event %.80s with its trace context: %w", row.Event.ID, err)
	}
	return msg, nil
}

// settleLoop settles batches in order, merging those that queued up
// behind a slow commit into one transaction, until settles is closed:
// what was published before a stop is still settled. A settle that fails
// ends the session through fail; the batches behind it are dropped
// unsettled, to be streamed again by the next session.
func (r *Relay) settleLoop(ctx context.Context, settles <-chan settlement, fail context.CancelCauseFunc) {
	session := ctx
	ctx = context.WithoutCancel(ctx)
	defer func() {
		for range settles { // keep the publisher from waiting on a send
		}
	}()
	limit := (settleQueue + 1) * r.cfg.BatchSize
	for s := range settles {
		// What arrives within settleLinger joins this settle, up to the
		// rows of settleQueue+1 full batches: what one settle holds, and
		// so what a relay that dies during it has published without
		// moving the slot, stays bounded. Under a trickle of small
		// batches a trim a batch would be a transaction, and a WAL flush,
		// for every few events; the position Postgres hears of moves only
		// every StatusInterval anyway.
		linger := time.NewTimer(settleLinger)
	merge:
		for len(s.done)+len(s.dead)+r.cfg.BatchSize <= limit {
			select {
			case more, ok := <-settles:
				if !ok {
					break merge
				}
				s.done, s.dead = append(s.done, more.done...), append(s.dead, more.dead...)
				s.end, s.commit = max(s.end, more.end), max(s.commit, more.commit)
			case <-linger.C:
				break merge
			}
		}
		linger.Stop()
		if err := r.settleRetrying(session, ctx, s); err != nil {
			fail(err)
			return
		}
	}
}

// settleRetrying settles s, trying again while the session lives when
// the settle failed by waiting: a lock on the table (CREATE INDEX's SHARE
// lock among them) holding the trim past settleTimeout would otherwise
// end the session, and the next would publish every row not trimmed
// again, once for each settleTimeout the lock lasts. Trying again is
// safe: the trim and the dead marks commit together or not at all, the
// DELETE and the dead mark find only pending rows, settled_lsn only moves
// forward, and the position has not moved. Meanwhile the confirmed
// batches queue up behind it (settleQueue), and the publisher waits for
// room: nothing more is published.
//
// Any other failure (a lost connection, a server refusing connections)
// ends the session. At a shutdown PostgreSQL waits for each walsender's
// client to report as flushed every position it was sent, and ends the
// settle's connection first: a relay that tried again would hold the
// server from stopping for ever, its walsender never done. Once the
// session ends (that way or by a stop), one attempt is made and its
// error returned.
func (r *Relay) settleRetrying(session, ctx context.Context, s settlement) error {
	wait := r.cfg.RetryMin
	for {
		sctx, cancel := context.WithTimeout(ctx, settleTimeout)
		err := r.settle(sctx, s)
		cancel()
		if err == nil || session.Err() != nil || !waited(err) {
			return err
		}
		r.log.Warn("settle waited too long; trying again", "error", err, "retry_in", wait)
		select {
		case <-session.Done():
		case <-time.After(wait):
		}
		wait = min(2*wait, r.cfg.RetryMax)
	}
}

// waited reports whether a settle failed by waiting on other
// transactions: past its timeout or a statement_timeout, a lock_timeout,
// a deadlock or serialization failure.
func waited(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "57014", "55P03", "40P01", "40001": // query_canceled, lock_not_available, deadlock_detected, serialization_failure
			return true
		}
		return false
	}
	return errors.Is(err, context.DeadlineExceeded)
}

// silenceLimit is how long the reader waits for any word from the
// server, having asked for a reply after a third of it, before it ends
// the session; statusWriteTimeout bounds one status send.
const (
	silenceLimit       = 30 * time.Second
	statusWriteTimeout = 5 * time.Second
)

// settleTimeout bounds one settle, which runs on after a stop.
const settleTimeout = 10 * time.Second

// settleLinger is how long a settle waits for more confirmed batches to
// join it: less than half the default StatusInterval, so that the
// position Postgres hears of is at most one settle behind.
const settleLinger = 100 * time.Millisecond

// settleQueue is how many confirmed batches wait for the settle loop
// before the confirm loop waits for it. With the BatchesInFlight batches
// published and not yet queued here and the settle being committed (which
// merges up to settleQueue more), it bounds what a relay that dies has
// published and not settled: (BatchesInFlight + 1 + 2*settleQueue)
// batches. That is what the next relay publishes again. What it settled
// beyond the position Postgres knows (since the last status update, or
// inside a transaction the position cannot pass) comes again in the
// stream too, but its transactions are at or before the settled_lsn its
// settles recorded, so the next relay reads those rows from the table and
// finds them trimmed.
const settleQueue = 4

// settle trims the confirmed rows and marks the dead ones in one
// transaction, and only after it commits moves the flushed position: a
// position reported before the trim committed could let a crash leave a
// published row in the table for ever, never streamed again. The commit
// is synchronous for the same reason. A row the broker confirmed whose
// trim is lost is published again, never lost. The same transaction
// records the commit position of the batch's latest transaction
// (settled_lsn): the trim is the record of what was published, and the
// position tells later sessions which streamed rows to check against it.
func (r *Relay) settle(ctx context.Context, s settlement) error {
	if len(s.done) > 0 || len(s.dead) > 0 {
		ids, attempts, reasons := make([]int64, len(s.dead)), make([]int32, len(s.dead)), make([]string, len(s.dead))
		for i, d := range s.dead {
			ids[i], attempts[i], reasons[i] = d.id, int32(d.attempts), outbox.ErrorText(d.reason)
			r.log.Error("outbox event is dead", "id", d.id, "attempts", d.attempts, "error", d.reason)
		}
		t := pgx.Identifier{r.cfg.Table}.Sanitize()
		err := pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
			b := &pgx.Batch{}
			// Whatever the role's or database's setting: a trim a crash
			// forgets after the slot moved would strand its rows.
			b.Queue(`SET LOCAL synchronous_commit = on`)
			b.Queue(trimSQL(t), s.done)
			b.Queue(markDeadSQL(t), ids, attempts, reasons)
			if s.commit != 0 {
				// In the trim's transaction: a later session reads the
				// rows of this transaction and those before it from
				// the table, where the trim shows what was published.
				b.Queue(`UPDATE `+stateTable(r.cfg.Table)+` SET settled_lsn = $2::text::pg_lsn WHERE slot = $1 AND settled_lsn < $2::text::pg_lsn`,
					r.cfg.Slot, s.commit.String())
			}
			return tx.SendBatch(ctx, b).Close()
		})
		if err != nil {
			return fmt.Errorf("settle %d published and %d dead rows: %w", len(s.done), len(s.dead), err)
		}
		r.dead.Add(int64(len(s.dead)))
		// Forgotten once the dead mark is committed, not when it is
		// decided: a batch that fails after the decision drops the mark,
		// the row comes again, and its NackTimeout must not start anew.
		for _, d := range s.dead {
			r.nackedSince.forget(d.id)
		}
	}
	if uint64(s.end) > r.flushed.Load() {
		r.flushed.Store(uint64(s.end))
	}
	return nil
}

// The settle's and the refetch's statements on the quoted table t. Each
// finds its rows by probing the primary key once per id, whatever the
// table's statistics say (TestSettleStatementsProbeThePrimaryKey). Their
// test of the state is written `(state = 'pending') IS TRUE`, which means
// the same but does not let the planner use the claim index, whose
// predicate is state = 'pending'. As a bare `state = 'pending'` beside
// `id = ANY($1)` it did: pgx prepares every statement, Postgres plans a
// prepared one generically after five runs, and on a table whose
// statistics were taken while it held few pending rows (new, or last
// analyzed while trimmed, as a CDC outbox mostly is) that plan read every
// pending row from the claim index and searched the id array for each of
// them. A trim of 1,250 ids from a 20,000-row backlog took 100 to 650 ms
// that way, and the drain ran at half its speed.
func trimSQL(t string) string {
	return `DELETE FROM ` + t + ` WHERE id = ANY($1::bigint[]) AND (state = 'pending') IS TRUE`
}

func markDeadSQL(t string) string {
	return `UPDATE ` + t + ` AS o SET state = 'dead', attempts = d.attempts, last_error = d.reason, finished_at = now()
	FROM unnest($1::bigint[], $2::int[], $3::text[]) AS d(id, attempts, reason)
	WHERE o.id = d.id AND (o.state = 'pending') IS TRUE`
}

// backfillPageSQL is a page of the backfill, after the cursor $1 and up to
// the bound $2, read
// with backfillPlanSQL in force: the planner must walk the primary key in
// its order. On a table whose statistics say it is small, which is how a
// backlog meets a new slot, its plan otherwise read every pending row
// after the cursor (through the claim index, or the whole table) and
// sorted them for each page, which made a backfill quadratic.
func backfillPageSQL(t string) string {
	return `SELECT ` + outbox.Columns + ` FROM ` + t + ` WHERE id > $1 AND id <= $2 AND state = 'pending' ORDER BY id LIMIT $3`
}

const backfillPlanSQL = `SET LOCAL enable_sort = off`

func pendingRowsSQL(t string) string {
	return `SELECT ` + outbox.Columns + ` FROM ` + t + ` WHERE id = ANY($1::bigint[]) AND (state = 'pending') IS TRUE ORDER BY id`
}

// maxSessionRetry caps the doubling wait between failed sessions: a
// broker back from an outage is found within it, and the rows waiting
// meanwhile are the lag.
const maxSessionRetry = 5 * time.Second
