package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/internal/amqpx"
	"github.com/warrenmq/warren/relay/cdc"
)

// faultLargeTx is the CDC mode's large transaction: one application
// transaction of largeTxBatches × cdcBatchSize events, its relays' sessions
// ended while it is being published, again and again.
const faultLargeTx faultKind = "CDC: one transaction of 20 batches, the streaming relay's sessions ended inside it (kill -9, SIGTERM)"

const (
	// cdcBatchSize is the CDC relays' BatchSize (--batch-size): small, so
	// that the large transaction is many batches while the consumers have
	// only a thousand events of it to handle.
	cdcBatchSize = 50
	// largeTxBatches is the large transaction's size in batches (issue
	// 30: 20× BatchSize), and largeTxEvery how many of them a session
	// trims before it is ended.
	largeTxBatches = 20
	largeTxEvery   = 2
	// largeTxGate is how many of its last batches the harness holds back
	// (largeTx). A relay's trim merges up to 1+4 batches, so one waiting
	// on the gate has trimmed at least 14 of the other 19: more than
	// sessionEndBound's 13.
	largeTxGate = 1
	// cdcSettleQueue is relay/cdc's settleQueue (unexported there): the
	// settlements queued behind the one being committed.
	cdcSettleQueue = 4
)

// sessionEndBound is relay/cdc's documented bound on the duplicates one
// session end makes the next session publish: what the ended relay had
// confirmed and not yet settled, (BatchesInFlight + 1 + 2×4) × BatchSize,
// whatever the size of the transaction.
func sessionEndBound() int {
	return (cdc.DefaultBatchesInFlight + 1 + 2*cdcSettleQueue) * cdcBatchSize
}

// largeTxRecord is what the large-transaction fault saw.
type largeTxRecord struct {
	events    int
	commitLSN int64 // the WAL position right after the COMMIT returned
	ends      int   // sessions ended while rows of it were in the table
	kills     int   // of them by kill -9 (the others by SIGTERM)
	// gateTrimmed: the rows of it trimmed when the relay was killed at
	// the gate (0: never there).
	gateTrimmed int
	passed      bool // the slot's confirmed position passed commitLSN
	// copies: every copy of its events the broker routed, counted on a
	// queue of the harness's bound to the exchange; dups[e] the copies
	// of an event already seen that arrived after the e-th session end
	// (0: before any ended).
	copies int
	dups   map[int]int
}

// maxDup is the most duplicates one session end caused.
func (r *largeTxRecord) maxDup() int {
	m := 0
	for e, n := range r.dups {
		if e > 0 {
			m = max(m, n)
		}
	}
	return m
}

// largeTx commits one transaction of largeTxBatches × cdcBatchSize events
// through the workload (the ledger expects every one) and ends the
// streaming relay's session each time it has trimmed largeTxEvery more
// batches of it, alternately by kill -9 and SIGTERM (the supervisor
// restarts it; the other relay takes the slot over), until the slot's
// confirmed position passes the transaction.
//
// A relay publishes the 20 batches in about a tenth of a second, faster
// than the harness can aim, so where those ends fall is chance. One end is
// placed: the transaction's last largeTxGate batch is held by a row lock
// of the harness's (taken while both relays are frozen, before either can
// stream the commit), so the relay trims what is before it but the last
// settle's worth, publishes it, and its trim waits on the lock; it is
// killed while it waits (Postgres says whom a backend waits for), late in
// the transaction, and the lock released. A relay that published the
// transaction from its start again after a session end (what relay/cdc
// did before settled_lsn) would then publish the 14 or more trimmed
// batches again, more than sessionEndBound; relay/cdc reads them from
// the table and publishes only what was not trimmed. Each session must
// get further than the one before, so the slot must pass within about
// twice as many session ends as the transaction has steps of
// largeTxEvery batches.
func (h *harness) largeTx(ctx context.Context, f *faultRecord) error {
	r := &largeTxRecord{events: largeTxBatches * cdcBatchSize}
	f.large = r
	var ends atomic.Int64
	tap, err := h.openTap(ctx, ends.Load)
	if err != nil {
		return err
	}
	defer tap.close()

	ids, gate, gatePID, err := h.commitGated(ctx, r)
	if gate != nil {
		defer gate.Rollback(context.WithoutCancel(ctx))
	}
	if err != nil {
		return err
	}
	every := largeTxEvery * cdcBatchSize
	limit := 2*(r.events/every) + 3
	pending := func() (n int) {
		if h.pool.QueryRow(ctx, `SELECT count(*) FROM `+outboxTable+` WHERE event_id = ANY($1)`, ids).Scan(&n) != nil {
			return -1
		}
		return n
	}
	deadline := time.Now().Add(h.mode.recoveryTimeout)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	left := pending()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		n := pending()
		atGate := gate != nil && h.trimWaitsOn(ctx, gatePID)
		if r.passed = h.slotPast(ctx, r.commitLSN); r.passed {
			break
		}
		if time.Now().After(deadline) || r.ends >= limit {
			f.problems = append(f.problems, fmt.Sprintf("the slot did not pass a transaction of %d events in %d session ends and %v: %d of its rows still in the table",
				r.events, r.ends, time.Since(f.start).Round(time.Second), n))
			break
		}
		if !atGate && !(left >= 0 && inRange(n, 0, left-every)) {
			continue
		}
		ended, err := h.endSession(ctx, f, r, atGate)
		if err != nil {
			return err
		}
		if !ended {
			continue // between sessions
		}
		ends.Store(int64(r.ends))
		if atGate {
			r.gateTrimmed = r.events - n
			// The killed relay's trim, still waiting on the lock, is
			// rolled back when its backend finds the client gone.
			if err := gate.Rollback(ctx); err != nil {
				return fmt.Errorf("release the gate: %w", err)
			}
			gate = nil
		}
		left = pending()
	}
	if r.passed && r.gateTrimmed == 0 {
		f.problems = append(f.problems, "no session was ended at the gate: the relay never trimmed the rows before it")
	}
	countCopies(ctx, tap, ids, r, f)
	return nil
}

// commitGated commits the large transaction with both relays frozen, and
// before they go on locks the rows of its last largeTxGate batches in a
// transaction of the harness's (the gate), which it returns. The freeze
// lasts the commit, about a second (a relay frozen past
// wal_sender_timeout loses its session: one more end, before any row of
// the transaction was streamed, so it costs none of its duplicates).
func (h *harness) commitGated(ctx context.Context, r *largeTxRecord) (ids []string, gate pgx.Tx, pid int, err error) {
	var frozen []*proc
	defer func() {
		for _, p := range frozen {
			if cerr := p.signal(syscall.SIGCONT); cerr != nil && err == nil {
				err = cerr
			}
		}
	}()
	for _, p := range h.procs {
		if p.spec.kind == "relay" && p.signal(syscall.SIGSTOP) == nil {
			frozen = append(frozen, p)
		}
	}
	if ids, err = h.commitLarge(ctx, r); err != nil {
		return nil, nil, 0, err
	}
	tail := ids[len(ids)-largeTxGate*cdcBatchSize:]
	if gate, err = h.pool.Begin(ctx); err != nil {
		return nil, nil, 0, err
	}
	if err = gate.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		return ids, gate, 0, err
	}
	tag, err := gate.Exec(ctx, `SELECT FROM `+outboxTable+` WHERE event_id = ANY($1) FOR UPDATE`, tail)
	if err == nil && tag.RowsAffected() != int64(len(tail)) {
		err = fmt.Errorf("the gate locked %d of the transaction's last %d rows: a relay trimmed some while frozen", tag.RowsAffected(), len(tail))
	}
	return ids, gate, pid, err
}

// trimWaitsOn reports whether a relay's trim (a DELETE from the outbox
// table) waits for a lock that the backend pid holds.
func (h *harness) trimWaitsOn(ctx context.Context, pid int) bool {
	var waits bool
	err := h.pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_stat_activity
		WHERE wait_event_type = 'Lock' AND query LIKE 'DELETE FROM %' || $2 || '%' AND $1 = ANY(pg_blocking_pids(pid)))`,
		pid, outboxTable).Scan(&waits)
	return err == nil && waits
}

func inRange(n, lo, hi int) bool { return n >= lo && n <= hi }

// commitLarge commits the large transaction: new work items created in
// one transaction of the workload, each with its event and ledger row.
func (h *harness) commitLarge(ctx context.Context, r *largeTxRecord) ([]string, error) {
	steps := make([]step, r.events)
	for i := range steps {
		steps[i] = create(h.wl.newItem(nil, "large"))
	}
	status, recs := h.wl.transact(ctx, steps, false, false)
	if status != statusCommitted {
		return nil, fmt.Errorf("the transaction of %d events did not commit (%v)", r.events, status)
	}
	err := h.withRetry(ctx, func(ctx context.Context) (err error) {
		r.commitLSN, _, err = h.slotPosition(ctx)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("read the WAL position after the large transaction: %w", err)
	}
	ids := make([]string, len(recs))
	for i, rec := range recs {
		ids[i] = rec.id
	}
	return ids, nil
}

// endSession ends the session of the relay streaming the slot, and says
// whether there was one: kill -9 at the gate and at odd ends, SIGTERM (a
// graceful stop, settling what it has confirmed) at even ones. It returns
// once the process has exited.
func (h *harness) endSession(ctx context.Context, f *faultRecord, r *largeTxRecord, atGate bool) (bool, error) {
	p, _, err := h.streamer(ctx)
	if err != nil || p == nil {
		return false, nil
	}
	r.ends++
	if atGate || r.ends%2 == 1 {
		// Not SIGTERM at the gate: the relay's trim waits on the
		// harness's lock, and a graceful stop would wait for it.
		r.kills++
		return true, p.kill()
	}
	limit := stopGrace(p.spec.kind)
	took, killed, exitErr, err := p.term(limit)
	rec := stopRecord{proc: p.spec.name, took: took, limit: limit, killed: killed, exitErr: exitErr}
	if err != nil {
		rec.err = err.Error()
	}
	// Checked with the memory alarm's stops: a stop past its grace, or a
	// non-zero exit, fails the run.
	f.stops = append(f.stops, rec)
	return true, nil
}

// countCopies waits until the tap has every copy the broker routed
// before the slot passed the transaction, and counts the transaction's
// duplicates per session end.
func countCopies(ctx context.Context, tap *tap, ids []string, r *largeTxRecord, f *faultRecord) {
	if !r.passed {
		return
	}
	arrivals, err := tap.drain(ctx)
	if err != nil {
		f.problems = append(f.problems, fmt.Sprintf("count the large transaction's copies: %v", err))
		return
	}
	seen := r.count(arrivals, ids)
	if seen < len(ids) {
		// Every copy was confirmed before its row was trimmed, and the
		// slot passed only once every row was: each must be on the tap.
		f.problems = append(f.problems, fmt.Sprintf("%d of the large transaction's %d events never reached the exchange before the slot passed it", len(ids)-seen, len(ids)))
	}
	if n := r.dups[0]; n > 0 {
		f.problems = append(f.problems, fmt.Sprintf("%d duplicates of the large transaction before any session ended", n))
	}
	for _, e := range slices.Sorted(maps.Keys(r.dups)) {
		if n := r.dups[e]; e > 0 && n > sessionEndBound() {
			f.problems = append(f.problems, fmt.Sprintf("session end %d of %d made the next sessions publish %d events of the large transaction again, more than the bound of %d",
				e, r.ends, n, sessionEndBound()))
		}
	}
}

// count records the copies of the transaction's events (ids) among the
// tap's arrivals, and charges each copy of an event already seen to the
// last session end before it arrived. It returns how many of ids came.
func (r *largeTxRecord) count(arrivals []tapArrival, ids []string) int {
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	seen := map[string]bool{}
	r.copies, r.dups = 0, map[int]int{}
	for _, a := range arrivals {
		if !want[a.id] {
			continue
		}
		r.copies++
		if seen[a.id] {
			r.dups[a.epoch]++
		}
		seen[a.id] = true
	}
	return len(seen)
}

// tap is a queue of the harness's own bound to the events exchange: the
// count of every copy of every event the relays publish, and when it
// came (after how many session ends).
type tap struct {
	conn  *amqp.Connection
	ch    *amqp.Channel
	queue string

	mu       sync.Mutex
	arrivals []tapArrival
	marker   chan struct{}
	done     chan struct{}
}

type tapArrival struct {
	id    string
	epoch int
}

// tapMarker is the message id of the marker drain sends through the tap.
const tapMarker = "reliability-tap-marker"

// openTap binds a new exclusive queue to the exchange and consumes it,
// tagging each delivery with epoch() at its arrival.
func (h *harness) openTap(ctx context.Context, epoch func() int64) (*tap, error) {
	conn, err := amqpx.Dial(ctx, h.amqpURL(), amqpx.DialOptions{Name: "reliability tap", Timeout: 5 * time.Second})
	if err != nil {
		return nil, err
	}
	t := &tap{conn: conn, queue: "reliability.tap." + h.runID, marker: make(chan struct{}), done: make(chan struct{})}
	deliveries, err := t.setup()
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("open the tap queue: %w", err)
	}
	go func() {
		defer close(t.done)
		for d := range deliveries {
			if d.MessageId == tapMarker {
				close(t.marker)
				continue
			}
			t.mu.Lock()
			t.arrivals = append(t.arrivals, tapArrival{id: d.MessageId, epoch: int(epoch())})
			t.mu.Unlock()
		}
	}()
	return t, nil
}

func (t *tap) setup() (<-chan amqp.Delivery, error) {
	ch, err := t.conn.Channel()
	if err != nil {
		return nil, err
	}
	t.ch = ch
	if _, err := ch.QueueDeclare(t.queue, false, false, true, false, nil); err != nil {
		return nil, err
	}
	if err := ch.QueueBind(t.queue, "", exchange, false, nil); err != nil {
		return nil, err
	}
	// Auto-ack: the tap's record is the arrivals, not the queue.
	return ch.Consume(t.queue, "", true, true, false, false, nil)
}

// drain sends a marker through the tap queue itself and waits for it: the
// queue is in order, so every copy routed to it before has then arrived.
// It returns the arrivals.
func (t *tap) drain(ctx context.Context) ([]tapArrival, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := t.ch.PublishWithContext(ctx, "", t.queue, false, false, amqp.Publishing{MessageId: tapMarker}); err != nil {
		return nil, err
	}
	select {
	case <-t.marker:
	case <-t.done:
		return nil, fmt.Errorf("the tap's channel closed")
	case <-ctx.Done():
		return nil, fmt.Errorf("the marker did not come through the tap queue within 30s")
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.arrivals), nil
}

// close deletes the queue (exclusive: the broker would on the connection's
// close anyway) and closes the connection.
func (t *tap) close() {
	if t.ch != nil {
		t.ch.QueueDelete(t.queue, false, false, false)
	}
	t.conn.Close()
	<-t.done
}
