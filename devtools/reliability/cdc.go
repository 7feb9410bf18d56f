package main

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/warrenmq/warren/relay/cdc"
)

// relayMode is how the two supervised relays move the outbox to the
// broker.
type relayMode string

const (
	// relayPoll: warren relay run, claiming rows with a lease.
	relayPoll relayMode = "poll"
	// relayCDC: warren relay run --mode cdc, streaming the table's inserts
	// from a logical replication slot; one relay streams, the other
	// stands by.
	relayCDC relayMode = "cdc"
)

// cdcSlot is the slot both CDC relays name: cdc.Config's default for the
// outbox table.
const cdcSlot = outboxTable + "_cdc"

func (h *harness) cdc() bool { return h.relays == relayCDC }

// cdcCounts are the mode's fault counts with the CDC mode's own.
func cdcCounts(m mode) map[faultKind]int {
	out := maps.Clone(m.counts)
	// The CDC relay does not hold back (ADR 028): its slot keeps the
	// backlog in the WAL.
	delete(out, faultBackpressure)
	maps.Copy(out, m.cdcCounts)
	return out
}

// checkRelayFaults refuses the CDC mode's faults with the polling relays.
func checkRelayFaults(rm relayMode, counts map[faultKind]int) error {
	for k := range counts {
		if k == faultLargeTx && rm != relayCDC {
			return fmt.Errorf("%s needs -relay-mode cdc", k)
		}
		if k == faultBackpressure && rm == relayCDC {
			return fmt.Errorf("%s needs the polling relays: the CDC relay does not hold back", k)
		}
	}
	return nil
}

// postgresSettings are the private cluster's settings for the relay mode.
// The CDC relays need logical decoding, a slot and a walsender each (8 of
// each leaves room for a relay restarted before its old walsender has
// gone). wal_sender_timeout is the stream's lease: a relay frozen longer
// loses its walsender, and with it the slot, to the relay standing by; it
// is set to the polling relays' lease so that the freeze fault
// (relayLease + 3s) outlasts it in both modes.
func (h *harness) postgresSettings() []string {
	if !h.cdc() {
		return nil
	}
	return []string{"wal_level=logical", "max_replication_slots=8", "max_wal_senders=8",
		fmt.Sprintf("wal_sender_timeout=%dms", h.mode.relayLease.Milliseconds())}
}

// withRetry runs f until it succeeds, for up to 10s: right after a
// restart or pg_terminate_backend, the pool may hand out a dead
// connection first.
func (h *harness) withRetry(ctx context.Context, f func(ctx context.Context) error) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := f(qctx)
		cancel()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// slotPosition reads the server's WAL position and the slot's confirmed
// one (-1 when the slot does not exist), in bytes.
func (h *harness) slotPosition(ctx context.Context) (current, confirmed int64, err error) {
	err = h.pool.QueryRow(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint,
			coalesce((SELECT pg_wal_lsn_diff(confirmed_flush_lsn, '0/0')::bigint FROM pg_replication_slots WHERE slot_name = $1), -1)`,
		cdcSlot).Scan(&current, &confirmed)
	return current, confirmed, err
}

// lag is cdc.Status's LagBytes: the WAL the server keeps for the slot.
func (h *harness) lag(ctx context.Context) (int64, error) {
	s, err := cdc.Status(ctx, h.pool, outboxTable, cdcSlot)
	return s.LagBytes, err
}

// whileStreaming waits (up to 3s) until a relay streams the slot while
// rows wait in the table, and returns that relay: a kill or a freeze then
// hits events between the stream and their trim, which the other relay
// must publish again once it has the slot. With no relay streaming it
// keeps p.
func (h *harness) whileStreaming(ctx context.Context, p *proc) (*proc, string) {
	deadline := time.Now().Add(3 * time.Second)
	var streamer *proc
	for time.Now().Before(deadline) && ctx.Err() == nil {
		q, pending, err := h.streamer(ctx)
		if err == nil && q != nil {
			streamer = q
			if pending > 0 {
				return q, "streaming the slot with rows pending"
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
	if streamer != nil {
		return streamer, "streaming the slot, no row pending"
	}
	return p, "no relay streaming the slot: one at random"
}

// streamer returns the relay streaming the slot (nil when none does), and
// the rows pending in the table.
func (h *harness) streamer(ctx context.Context) (*proc, int, error) {
	var name string
	var pending int
	err := h.pool.QueryRow(ctx, `SELECT
			coalesce((SELECT a.application_name FROM pg_replication_slots s JOIN pg_stat_activity a ON a.pid = s.active_pid
				WHERE s.slot_name = $1), ''),
			(SELECT count(*) FROM `+outboxTable+` WHERE state = 'pending')`, cdcSlot).Scan(&name, &pending)
	if err != nil {
		return nil, 0, err
	}
	return h.procNamed(name), pending, nil
}

func (h *harness) procNamed(name string) *proc {
	for _, p := range h.procs {
		if p.spec.name == name {
			return p
		}
	}
	return nil
}

// slotRecord is what the slot did around one fault (cdc mode).
type slotRecord struct {
	// Sampled every second through a broker outage: the lag just before
	// the broker stopped, its highest while it was down, and at the lift.
	lagBefore, lagPeak, lagAtLift int64
	samples                       int
	// Around a Postgres restart: the slot's confirmed position before the
	// shutdown, and as the restarted server had it before a relay
	// streamed it again.
	confirmedBefore, confirmedAfter int64
	restarted                       bool

	// liftLSN is the server's WAL position when the fault was lifted;
	// caughtUp says the slot's confirmed position passed it (and, after
	// an outage, the lag fell below its peak), catchUp how long after the
	// lift, and lagAfter the lag then.
	liftLSN  int64
	caughtUp bool
	catchUp  time.Duration
	lagAfter int64
}

// slotBefore records, in cdc mode, the slot's lag and confirmed position
// before a fault that stops a service.
func (h *harness) slotBefore(ctx context.Context, f *faultRecord) {
	if !h.cdc() {
		return
	}
	s := &slotRecord{}
	f.slot = s
	err := h.withRetry(ctx, func(ctx context.Context) (err error) {
		if s.lagBefore, err = h.lag(ctx); err != nil {
			return err
		}
		_, s.confirmedBefore, err = h.slotPosition(ctx)
		return err
	})
	if err != nil {
		f.problems = append(f.problems, fmt.Sprintf("read the slot before the fault: %v", err))
	}
}

// holdSampling holds a broker outage for d. In cdc mode it samples the
// slot's lag every second meanwhile, and checks that it grew: with the
// broker away no relay can publish, so the slot's confirmed position
// stays while the workload keeps writing.
func (h *harness) holdSampling(ctx context.Context, d time.Duration, f *faultRecord) {
	end := time.Now().Add(d)
	for {
		if s := f.slot; s != nil {
			sctx, cancel := context.WithTimeout(ctx, time.Second)
			if lag, err := h.lag(sctx); err == nil {
				s.samples++
				s.lagAtLift, s.lagPeak = lag, max(s.lagPeak, lag)
			}
			cancel()
		}
		wait := min(time.Until(end), time.Second)
		if wait <= 0 {
			break
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
	if s := f.slot; s != nil {
		if p := s.outageProblem(); p != "" {
			f.problems = append(f.problems, p)
		}
	}
}

// outageProblem says what is wrong with the lag sampled through a broker
// outage: it must have been read, and have grown.
func (s *slotRecord) outageProblem() string {
	switch {
	case s.samples == 0:
		return "the slot's lag could not be read while the broker was down"
	case s.lagAtLift <= s.lagBefore:
		return fmt.Sprintf("the slot's lag did not grow while the broker was down: %d bytes before, %d at the end", s.lagBefore, s.lagAtLift)
	}
	return ""
}

// settled reports whether a slot at confirmed, keeping lag bytes, has
// caught up with the fault: past the WAL position at the lift, and after
// an outage (lag sampled) back below the peak.
func (s *slotRecord) settled(confirmed, lag int64) bool {
	return confirmed >= s.liftLSN && (s.samples == 0 || lag < s.lagPeak)
}

// slotAfterRestart reads the slot as the restarted server has it. The
// slot must have survived the restart (its state is written by the
// shutdown checkpoint); its confirmed position may be behind the one
// read before the shutdown (a position reported after the last
// checkpoint that wrote the slot), which costs duplicates, never events.
func (h *harness) slotAfterRestart(ctx context.Context, f *faultRecord) {
	s := f.slot
	if s == nil {
		return
	}
	s.restarted = true
	err := h.withRetry(ctx, func(ctx context.Context) (err error) {
		_, s.confirmedAfter, err = h.slotPosition(ctx)
		return err
	})
	switch {
	case err != nil:
		f.problems = append(f.problems, fmt.Sprintf("read the slot after the restart: %v", err))
	case s.confirmedAfter < 0:
		f.problems = append(f.problems, "the replication slot is gone after the restart")
	}
}

// slotAtLift records the server's WAL position when a fault was lifted:
// the slot must pass it once the relays have caught up.
func (h *harness) slotAtLift(ctx context.Context, f *faultRecord) {
	if f.slot == nil {
		f.slot = &slotRecord{}
	}
	err := h.withRetry(ctx, func(ctx context.Context) (err error) {
		f.slot.liftLSN, _, err = h.slotPosition(ctx)
		return err
	})
	if err != nil {
		f.problems = append(f.problems, fmt.Sprintf("read the WAL position at the lift: %v", err))
		f.slot.liftLSN = -1
	}
}

// awaitSlot waits, after the probe came through, until the slot's
// confirmed position has passed the WAL position at the lift: every event
// written before the fault ended is confirmed and trimmed and the server
// no longer keeps its WAL. After a broker outage, the lag must also have
// fallen back below its peak. Either not within the recovery timeout is a
// problem of the fault.
func (h *harness) awaitSlot(ctx context.Context, f *faultRecord) {
	s := f.slot
	if s == nil || s.liftLSN < 0 {
		return
	}
	deadline := time.Now().Add(h.mode.recoveryTimeout)
	var confirmed, lag int64
	for {
		qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, c, err := h.slotPosition(qctx)
		l, lerr := h.lag(qctx)
		cancel()
		if err == nil && lerr == nil {
			confirmed, lag = c, l
			if s.settled(confirmed, lag) {
				s.caughtUp, s.catchUp, s.lagAfter = true, time.Since(f.end), lag
				return
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
	f.problems = append(f.problems, fmt.Sprintf("the slot did not catch up within %v of the probe: confirmed position %d bytes behind the lift's, lag %d bytes (peak %d)",
		h.mode.recoveryTimeout, s.liftLSN-confirmed, lag, s.lagPeak))
}

// slotPast reports whether the slot's confirmed position has passed lsn.
func (h *harness) slotPast(ctx context.Context, lsn int64) bool {
	_, confirmed, err := h.slotPosition(ctx)
	return err == nil && confirmed >= lsn
}

// checkSlot is the end of a cdc run: one slot, still usable, that has
// passed the WAL position of the workload's last write, so the server
// keeps none of the run's WAL for it.
func (h *harness) checkSlot(ctx context.Context, res *result) error {
	slots, err := cdc.Slots(ctx, h.pool, outboxTable)
	if err != nil {
		return fmt.Errorf("read the replication slots: %w", err)
	}
	res.slots = slots
	if len(slots) != 1 || slots[0].Slot != cdcSlot {
		res.fail("replication slots recorded for %s: %v, want exactly %s", outboxTable, slots, cdcSlot)
	}
	for _, s := range slots {
		if s.WALStatus == "lost" || s.WALStatus == "dropped" {
			res.fail("replication slot %s is %s", s.Slot, s.WALStatus)
		}
	}
	if res.slotCaughtUp = h.slotPast(ctx, h.stopLSN); !res.slotCaughtUp {
		res.fail("replication slot %s has not passed the WAL position of the workload's end after the drain", cdcSlot)
	}
	for _, f := range h.faults {
		if f.large != nil && f.large.commitLSN > 0 && !h.slotPast(ctx, f.large.commitLSN) {
			res.fail("%s at %s: the slot has not passed the transaction's commit after the drain", f.kind, f.start.Format("15:04:05"))
		}
	}
	return nil
}

// relaysText describes the run's relays for the report.
func (r *result) relaysText() string {
	if r.relays == relayCDC {
		return fmt.Sprintf("two `warren relay run --mode cdc` relays (`--publish-timeout %v --batch-size %d`) naming one logical replication slot, `%s`, which one streams while the other stands by (the private cluster runs `wal_level = logical`, with `wal_sender_timeout = %v`, the stream's lease)",
			relayStopGrace, cdcBatchSize, cdcSlot, r.mode.relayLease)
	}
	return fmt.Sprintf("two `warren relay run` relays (`--lease %v --publish-timeout %v`)", r.mode.relayLease, relayStopGrace)
}

func slotsText(slots []cdc.SlotStatus) string {
	if len(slots) == 0 {
		return "none"
	}
	var out []string
	for _, s := range slots {
		out = append(out, fmt.Sprintf("`%s` active %v, lag %s, WAL %s, oldest pending row %s", s.Slot, s.Active, fmtBytes(s.LagBytes),
			cmp.Or(s.WALStatus, "–"), fmtDur(s.OldestPending)))
	}
	return strings.Join(out, "; ")
}

func fmtBytes(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// slotMarkdown is the report's section on the slot: how soon after each
// kind of fault it caught up, and its lag through the broker outages and
// Postgres restarts.
func (r *result) slotMarkdown(w func(string, ...any)) {
	w("## The replication slot\n\n")
	w("After every fault, the harness reads the server's WAL position at the lift and, once the probe has come through, waits for the slot's confirmed position (`confirmed_flush_lsn`) to pass it: every event written before the lift is then confirmed by the broker and trimmed from the table, and the server keeps none of that WAL. Not within the recovery timeout fails the run. *Slot caught up* is from the lift.\n\n")
	w("| fault | count | slot caught up median / max |\n|---|---:|---|\n")
	byKind := map[faultKind][]time.Duration{}
	for _, f := range r.faults {
		if f.slot != nil && f.slot.caughtUp {
			byKind[f.kind] = append(byKind[f.kind], f.slot.catchUp)
		}
	}
	for _, k := range faultOrder {
		if ds := byKind[k]; len(ds) > 0 {
			w("| %s | %d | %s |\n", k, len(ds), medMax(ds))
		}
	}
	r.largeTxMarkdown(w)
	var outages, restarts []*faultRecord
	for _, f := range r.faults {
		switch {
		case f.slot == nil:
		case f.kind == faultBrokerOutage:
			outages = append(outages, f)
		case f.kind == faultPGRestart:
			restarts = append(restarts, f)
		}
	}
	if len(outages) > 0 {
		w("\nBroker outages: the slot's lag (`cdc.Status`, `LagBytes`: the WAL the server keeps for the slot) sampled every second while the broker was down. It must grow (no relay can publish, so the slot stays while the workload writes) and, after the broker is back, fall below its peak with the slot past the lift's position.\n\n")
		w("| at | down | lag before | peak | at the lift | samples | caught up after | lag then |\n|---|---|---:|---:|---:|---:|---|---:|\n")
		for _, f := range outages {
			s := f.slot
			w("| %s | %s | %s | %s | %s | %d | %s | %s |\n", f.start.Format("15:04:05"), fmtDur(f.end.Sub(f.start)), fmtBytes(s.lagBefore),
				fmtBytes(s.lagPeak), fmtBytes(s.lagAtLift), s.samples, caughtUpText(s), fmtBytes(s.lagAfter))
		}
	}
	if len(restarts) > 0 {
		w("\nPostgres restarts: the slot's confirmed position before the fast shutdown, and as the restarted server had it. The slot is written to disk at checkpoints (the shutdown's among them); a position behind the one before means the relays stream again what came after it: duplicates, which the consumers' dedup absorbs, never a loss.\n\n")
		w("| at | outage | confirmed position after the restart | caught up after |\n|---|---|---|---|\n")
		for _, f := range restarts {
			s := f.slot
			pos := "the same or ahead"
			if d := s.confirmedBefore - s.confirmedAfter; d > 0 {
				pos = fmt.Sprintf("%s behind the one before", fmtBytes(d))
			}
			w("| %s | %s | %s | %s |\n", f.start.Format("15:04:05"), f.target, pos, caughtUpText(s))
		}
	}
	w("\n")
}

func caughtUpText(s *slotRecord) string {
	if !s.caughtUp {
		return "not caught up"
	}
	return fmtDur(s.catchUp)
}

// largeTxMarkdown is the report's account of the large transactions: the
// session ends each met, and the duplicates each end caused.
func (r *result) largeTxMarkdown(w func(string, ...any)) {
	var large []*faultRecord
	for _, f := range r.faults {
		if f.large != nil {
			large = append(large, f)
		}
	}
	if len(large) == 0 {
		return
	}
	w("\nLarge transactions: one transaction of %d × %d events (the relays' `--batch-size`), the streaming relay's session ended (kill -9 and SIGTERM in turn) each time it had trimmed %d more batches of it, and once, by kill -9, at a gate the harness holds with a row lock on its last %d batches, after the relay has trimmed what is before it; then until the slot passed it. Every copy the broker routed is counted on a queue of the harness's bound to the exchange; a copy of an event already seen counts against the last session end before it arrived, and none may exceed the documented bound, (BatchesInFlight + 1 + 2×4) × BatchSize = %d.\n\n",
		largeTxBatches, cdcBatchSize, largeTxEvery, largeTxGate, sessionEndBound())
	w("| at | session ends | trimmed at the gate | slot passed it | copies routed | duplicates, most after one end |\n|---|---:|---:|---|---:|---:|\n")
	for _, f := range large {
		l := f.large
		w("| %s | %d (%d kill -9) | %d | %v | %d | %d |\n", f.start.Format("15:04:05"), l.ends, l.kills, l.gateTrimmed, l.passed, l.copies, l.maxDup())
	}
}
