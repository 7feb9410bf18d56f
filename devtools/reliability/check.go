package main

import (
	"bufio"
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/warrenmq/warren/consumer"
	"github.com/warrenmq/warren/dedup"
	"github.com/warrenmq/warren/dlq"
	"github.com/warrenmq/warren/dlqtool"
	"github.com/warrenmq/warren/internal/amqpx"
)

// drain waits, with the workload stopped and every process running, until
// every committed event, follow-up and hostile message has reached its
// fate and the outbox is empty, or the mode's drain timeout passes.
func (h *harness) drain(ctx context.Context) bool {
	start := time.Now()
	defer func() { h.timings["drain"] = time.Since(start) }()
	for _, p := range h.procs {
		p.signal(syscall.SIGCONT) // nothing stays frozen
	}
	deadline := start.Add(h.mode.drainTimeout)
	var lastReplay time.Time
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if h.drained(ctx) {
			return true
		}
		if time.Since(lastReplay) >= replayEvery {
			lastReplay = time.Now()
			if ids, _ := h.awaited(ctx); len(ids) > 0 {
				n, problems, err := replayExhausted(ctx, h.amqpURL(), []string{webhookQueue, autoQueue}, ids,
					func(m dlq.Metadata) string { return triedTooLittle(m, consumer.DefaultMaxAttempts, h.mode.retryDelays) })
				h.replayProblems = append(h.replayProblems, problems...)
				if err != nil {
					h.logf("drain: replay exhausted events: %v", err)
				}
				for name, k := range n {
					h.logf("drain: replayed %d exhausted events from %s", k, dlq.QueueName(name))
					if h.replayed == nil {
						h.replayed = map[string]int{}
					}
					h.replayed[name] += k
				}
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
	return false
}

// replayEvery is how often the drain looks for exhausted events to replay.
const replayEvery = 10 * time.Second

// replayExhausted replays, as an operator would after an incident (`warren
// dlq replay --queue NAME --class exhausted --id …`), the events of ids
// (those the drain awaits) that the consumers dead-lettered as exhausted,
// and returns how many per consumer. An event refused at every attempt
// (receiver failure windows lined up with its retry tiers) is
// dead-lettered by design, not lost; once replayed it must reach its
// effect like any other event, or the check reports it lost. Only events of
// ids move: a hostile message that must stay dead is never among them.
// Each is read first and its record given to check, whose complaints are
// returned as problems: a replay must not hide retries that stopped
// retrying.
func replayExhausted(ctx context.Context, url string, consumers, ids []string, check func(dlq.Metadata) string) (map[string]int, []string, error) {
	conn, err := amqpx.Dial(ctx, url, amqpx.DialOptions{Name: "reliability replay", Timeout: 5 * time.Second})
	if err != nil {
		return nil, nil, err
	}
	defer conn.Close()
	out := map[string]int{}
	var problems []string
	for _, name := range consumers {
		q, err := dlqtool.Open(ctx, conn, name)
		if err != nil {
			return out, problems, err
		}
		f := dlqtool.Filter{Classes: []dlq.Class{dlq.ClassExhausted}, EventIDs: ids}
		msgs, err := q.Peek(ctx, dlqtool.PeekOptions{Filter: f})
		if err != nil || len(msgs) == 0 {
			return out, problems, err
		}
		// Only the messages checked move; one exhausted meanwhile waits
		// for the next round.
		f.EventIDs = nil
		for _, m := range msgs {
			f.EventIDs = append(f.EventIDs, m.EventID)
			if p := check(m.Metadata); p != "" {
				problems = append(problems, fmt.Sprintf("%s: event %s exhausted its retries too soon: %s", q.Name(), m.EventID, p))
			}
		}
		res, err := q.Replay(ctx, dlqtool.ReplayOptions{Filter: f})
		if res.Done > 0 {
			out[name] = res.Done
		}
		if err != nil {
			return out, problems, fmt.Errorf("%s: %w", q.Name(), err)
		}
	}
	return out, problems, nil
}

// triedTooLittle says what is wrong with m, the record of an event
// dead-lettered as exhausted, when it was not tried maxAttempts times with
// the retry tiers' waits between its failures (the harness's receiver
// sends no Retry-After, so no hint shortens a wait); "" when it was.
// Retries that collapsed would exhaust events inside one failure window.
func triedTooLittle(m dlq.Metadata, maxAttempts int, tiers []time.Duration) string {
	if m.Attempts < maxAttempts {
		return fmt.Sprintf("%d attempts, want %d", m.Attempts, maxAttempts)
	}
	var waits time.Duration
	for i := range maxAttempts - 1 {
		waits += tiers[min(i, len(tiers)-1)]
	}
	// The failure times are the consumer's clock; a second covers their
	// rounding and the consumer's own time between a failure and its
	// record.
	if span := m.LastFailure.Sub(m.FirstFailure); span < waits-time.Second {
		return fmt.Sprintf("%v from the first failure to the last, but the retry tiers alone wait %v", span.Round(time.Millisecond), waits)
	}
	return ""
}

// awaited returns the events the drain still waits for at an effect: the
// workload's committed events, the automation's follow-ups, the dead
// letters moved back and the hostile messages that must be delivered. ok
// is false when Postgres could not be asked.
func (h *harness) awaited(ctx context.Context) (ids []string, ok bool) {
	ids = h.tracker.outstanding()
	// Follow-ups are committed by the automation, not the workload.
	rows, err := h.pool.Query(ctx, `SELECT follow_up_event_id FROM automation_runs WHERE follow_up_event_id IS NOT NULL`)
	if err != nil {
		return nil, false
	}
	followUps, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, false
	}
	for _, hm := range h.hostile {
		if hm.webhook.delivered {
			followUps = append(followUps, hm.id)
		}
	}
	for _, id := range append(followUps, h.moved...) {
		if !h.recv.has(id) {
			ids = append(ids, id)
		}
	}
	return ids, true
}

func (h *harness) drained(ctx context.Context) bool {
	if ids, ok := h.awaited(ctx); !ok || len(ids) > 0 {
		return false
	}
	var pending int
	if h.pool.QueryRow(ctx, `SELECT count(*) FROM `+outboxTable+` WHERE state = 'pending'`).Scan(&pending) != nil || pending > 0 {
		return false
	}
	// A trimmed table is not enough with CDC: the slot must also have
	// moved past the workload's writes, or the server keeps their WAL.
	if h.cdc() && !h.slotPast(ctx, h.stopLSN) {
		return false
	}
	// Every expected dead letter is in its queue (counted, not read: the
	// verdict reads them).
	want := map[string]int{}
	for _, hm := range h.hostile {
		if hm.webhook.class != "" {
			want[dlq.QueueName(webhookQueue)]++
		}
		if hm.automation.class != "" {
			want[dlq.QueueName(autoQueue)]++
		}
	}
	depths, err := h.queueDepths(ctx)
	if err != nil {
		return false
	}
	for q, n := range want {
		if depths[q] < n {
			return false
		}
	}
	// Copies waiting in a retry tier (a relay's second publish, a deferral
	// while another worker held the lease) must come back and be
	// acknowledged as duplicates too.
	for q, n := range depths {
		if n > 0 && !dlq.IsQueueName(q) {
			return false
		}
	}
	return true
}

func (h *harness) queueDepths(ctx context.Context) (map[string]int, error) {
	conn, err := amqpx.Dial(ctx, h.amqpURL(), amqpx.DialOptions{Name: "reliability checker", Timeout: 5 * time.Second})
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	out := map[string]int{}
	for _, name := range []string{webhookQueue, autoQueue} {
		for _, q := range consumer.TopologyFor(h.consumerConfig(name)).Queues() {
			ch, err := conn.Channel()
			if err != nil {
				return nil, err
			}
			st, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
			if err != nil {
				return nil, fmt.Errorf("queue %s: %w", q, err)
			}
			out[q] = st.Messages
			ch.Close()
		}
	}
	return out, nil
}

// duplicate is an effect applied more than once, and why.
type duplicate struct {
	id     string
	count  int
	cause  string // empty: unexplained
	detail string
	first  time.Time // the first delivery
}

// heldEvent is an automation event not yet handled because the lease of a
// killed worker still holds it.
type heldEvent struct {
	id      string
	expires time.Time
}

// check reads every effect from the services and compares it with what
// the workload committed.
func (h *harness) check(ctx context.Context) (*result, error) {
	res := &result{mode: h.mode, relays: h.relays, broker: h.broker, timings: h.timings, faults: h.faults, stats: map[string]consumerStats{}}
	res.committedTx, res.rolledBackTx = h.wl.countOf(statusCommitted), h.wl.countOf(statusRolledBack)
	res.failedTx, res.ambiguousTx = h.wl.countOf(statusFailed), h.wl.countOf(statusAmbiguous)
	h.wl.txErrors.Range(func(k, v any) bool {
		res.txErrors = append(res.txErrors, fmt.Sprintf("%d× %s", v.(*atomic.Int64).Load(), k))
		return true
	})
	slices.Sort(res.txErrors)

	// The ledger table: which application events committed.
	type ledgerRow struct {
		id, typ, entity, initiator, field, prev, value string
		txID                                           int64
		probe                                          bool
	}
	rows, err := h.pool.Query(ctx, `SELECT event_id, event_type, entity_id, initiator_type, field, prev_value, new_value, tx_id, probe
		FROM reliability_ledger ORDER BY tx_id, event_id`)
	if err != nil {
		return nil, fmt.Errorf("read the ledger: %w", err)
	}
	ledger := map[string]*ledgerRow{}
	var ledgerOrder []*ledgerRow
	var lr ledgerRow
	if _, err := pgx.ForEachRow(rows, []any{&lr.id, &lr.typ, &lr.entity, &lr.initiator, &lr.field, &lr.prev, &lr.value, &lr.txID, &lr.probe}, func() error {
		r := lr
		ledger[r.id] = &r
		ledgerOrder = append(ledgerOrder, &r)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("read the ledger: %w", err)
	}
	res.eventsCommitted = len(ledger)
	// The trigger capture's events are checked like every other below;
	// here, that every write path was taken.
	res.captured = map[string]int{}
	for _, l := range ledgerOrder {
		if strings.HasPrefix(l.typ, capturedTypes+".") {
			res.captured[l.field]++
		}
	}
	for _, p := range writePaths {
		if res.captured[p.String()] == 0 {
			res.fail("no captured write committed %s: that path was not attacked", p)
		}
	}
	neverCommitted := map[string]bool{}
	h.tracker.mu.Lock()
	for id, r := range h.tracker.events {
		_, inLedger := ledger[id]
		switch r.status {
		case statusCommitted:
			if !inLedger {
				res.fail("event %s: COMMIT succeeded but its ledger row is missing (a lost commit)", id)
			}
		case statusRolledBack, statusFailed, statusPending:
			if inLedger {
				res.fail("event %s: its transaction did not commit, yet its ledger row exists", id)
			}
			neverCommitted[id] = true
		case statusAmbiguous:
			if inLedger {
				res.ambiguousCommitted++
			} else {
				res.ambiguousLost++
				neverCommitted[id] = true
			}
		}
		if r.probe && inLedger {
			res.probes++
		}
	}
	h.tracker.mu.Unlock()
	res.eventsNeverCommitted = len(neverCommitted)

	// The automation's effects: its runs.
	type runRow struct {
		eventID, workItem, followUp string
		ruleID                      int64
		ranAt                       time.Time
	}
	rows, err = h.pool.Query(ctx, `SELECT event_id, rule_id, work_item_id, coalesce(follow_up_event_id, ''), ran_at FROM automation_runs`)
	if err != nil {
		return nil, fmt.Errorf("read the automation runs: %w", err)
	}
	var runs []runRow
	var rr runRow
	if _, err := pgx.ForEachRow(rows, []any{&rr.eventID, &rr.ruleID, &rr.workItem, &rr.followUp, &rr.ranAt}, func() error {
		runs = append(runs, rr)
		return nil
	}); err != nil {
		return nil, err
	}
	ranFor := map[string]int{}
	followUps := map[string]bool{}
	for _, r := range runs {
		ranFor[r.eventID]++
		l := ledger[r.eventID]
		switch {
		case neverCommitted[r.eventID]:
			res.fail("automation ran its rule for event %s, whose transaction never committed", r.eventID)
		case l == nil:
			res.fail("automation ran its rule for event %s, which the workload never wrote", r.eventID)
		case !(&eventRecord{typ: l.typ, initiator: l.initiator, field: l.field, prev: l.prev, value: l.value}).qualifies():
			res.fail("automation ran its rule for event %s (%s by %s), which the rule does not match", r.eventID, l.typ, l.initiator)
		case r.ruleID != h.ruleID:
			res.fail("automation run for event %s names rule %d, not %d", r.eventID, r.ruleID, h.ruleID)
		}
		if r.followUp == "" {
			res.fail("automation run for event %s changed nothing: the work item's priority was already %q (a second run?)", r.eventID, rulePriority)
		} else {
			followUps[r.followUp] = true
		}
	}
	res.followUps = len(followUps)
	qualifying := map[string]bool{}
	for _, l := range ledgerOrder {
		if (&eventRecord{typ: l.typ, initiator: l.initiator, field: l.field, prev: l.prev, value: l.value}).qualifies() {
			qualifying[l.id] = true
		}
	}
	res.autoExpected = len(qualifying)
	for id := range qualifying {
		switch n := ranFor[id]; {
		case n == 0:
			if held, ok := h.heldByLease(ctx, id); ok {
				res.autoHeld = append(res.autoHeld, held)
			} else {
				res.autoLost = append(res.autoLost, id)
			}
		case n > 1:
			res.fail("automation ran the rule %d times for event %s", n, id)
		}
	}
	sort.Strings(res.autoLost)
	for _, id := range res.autoLost {
		res.fail("event %s never reached the automation (no run, no lease holding it)", id)
	}
	if len(res.autoHeld) > 0 && h.mode.drainTimeout >= automationLease {
		res.fail("%d events still held by dead workers' leases after a drain longer than the lease", len(res.autoHeld))
	}

	// Work items: exactly the committed ones, with the priority the rule
	// and the user's changes leave.
	wantPriority := map[string]string{}
	for _, l := range ledgerOrder {
		switch {
		case l.typ == "workitem.created":
			wantPriority[l.entity] = "high"
		case l.field == "priority":
			wantPriority[l.entity] = l.value
		}
	}
	heldItems := map[string]bool{}
	for _, held := range res.autoHeld {
		heldItems[ledger[held.id].entity] = true
	}
	for id := range qualifying {
		if !heldItems[ledger[id].entity] {
			wantPriority[ledger[id].entity] = rulePriority
		}
	}
	rows, err = h.pool.Query(ctx, `SELECT id, priority FROM work_items`)
	if err != nil {
		return nil, err
	}
	gotPriority := map[string]string{}
	var itemID, priority string
	if _, err := pgx.ForEachRow(rows, []any{&itemID, &priority}, func() error {
		gotPriority[itemID] = priority
		return nil
	}); err != nil {
		return nil, err
	}
	for id, want := range wantPriority {
		got, ok := gotPriority[id]
		switch {
		case !ok:
			res.fail("work item %s: its creation committed, but the row is missing", id)
		case got != want && !heldItems[id]:
			res.fail("work item %s: priority %q, want %q", id, got, want)
		}
	}
	for id := range gotPriority {
		if _, ok := wantPriority[id]; !ok {
			res.fail("work item %s exists, but no committed transaction created it", id)
		}
	}
	res.workItems = len(gotPriority)

	// The webhook's effect: the receiver's ledger.
	accepted, bodies := h.recv.snapshot()
	expectWebhook := map[string]string{}
	for id := range ledger {
		expectWebhook[id] = "application event"
	}
	for id := range followUps {
		expectWebhook[id] = "automation follow-up"
	}
	for _, id := range h.moved {
		expectWebhook[id] = "moved back from the DLQ to its queue, refused once"
	}
	for _, hm := range h.hostile {
		if hm.webhook.delivered {
			expectWebhook[hm.id] = "hostile " + hm.kind
		}
	}
	res.webhookExpected = len(expectWebhook)
	res.byPoster = map[string]int{}
	for _, acc := range accepted {
		for _, a := range acc {
			res.byPoster[a.poster]++
		}
	}
	kills := h.killTimes()
	redisRestarts := append(h.faultTimes(faultRedisRestart), h.faultTimes(faultRedisDown)...)
	// A stalled or absent Redis fails the done-mark due right after a 200.
	redisStalls := append(h.faultWindows(faultRedisStall), h.faultWindows(faultRedisDown)...)
	sendFailures := h.sendFailures()
	for id, what := range expectWebhook {
		acc := accepted[id]
		switch {
		case len(acc) == 0:
			res.webhookLost = append(res.webhookLost, id+" ("+what+")")
		case len(acc) > 1:
			ev := evidence{kills: kills, stalls: h.stalls, redisRestarts: redisRestarts, redisStalls: redisStalls, losses: h.nodeLosses(), sendFailures: sendFailures[id]}
			cause, detail := explainDuplicate(acc, ev)
			first := slices.MinFunc(acc, func(a, b acceptance) int { return a.at.Compare(b.at) }).at
			res.webhookDups = append(res.webhookDups, duplicate{id: id, count: len(acc), cause: cause, detail: detail, first: first})
		}
	}
	sort.Strings(res.webhookLost)
	for _, id := range res.webhookLost {
		res.fail("event %s never reached the webhook receiver", id)
	}
	slices.SortFunc(res.webhookDups, func(a, b duplicate) int { return strings.Compare(a.id, b.id) })
	for _, d := range res.webhookDups {
		if d.cause == "" {
			res.fail("event %s delivered %d times to the webhook receiver with no fault to explain it: %s; faults from 30s before the first delivery to 30s after: %s; the replicas logged of it: %s",
				d.id, d.count, d.detail, h.faultsAround(d.first, 30*time.Second), h.logLinesOf(d.id))
		}
	}
	for id := range accepted {
		if _, ok := expectWebhook[id]; ok {
			continue
		}
		ev := bodies[id]
		switch {
		case neverCommitted[id]:
			res.fail("event %s reached the webhook receiver, but its transaction never committed", id)
		default:
			res.fail("the webhook receiver accepted event %s (%s by %s), which nobody expected", id, ev.Type, ev.InitiatorType)
		}
	}
	res.receiverRefused, res.receiverAbandoned, res.receiverForged, res.receiverMismatched =
		h.recv.refused, h.recv.abandoned, h.recv.forged, h.recv.mismatched
	if h.recv.forged > 0 || h.recv.mismatched > 0 {
		res.fail("the receiver saw %d deliveries with a bad signature and %d whose header id differs from the body", h.recv.forged, h.recv.mismatched)
	}
	// Needs the webhook not to follow redirects (finding 2).
	if res.redirectTargetHits = h.endpoints.targetHits.Load(); res.redirectTargetHits > 0 {
		res.fail("the redirect target received %d requests: the webhook followed its endpoint's 307 and re-sent the signed event", res.redirectTargetHits)
	}

	// Latency from commit to each effect.
	h.tracker.mu.Lock()
	for id, r := range h.tracker.events {
		if r.status != statusCommitted {
			continue
		}
		if at, ok := h.tracker.webhookAt[id]; ok {
			res.webhookLatency = append(res.webhookLatency, at.Sub(r.committedAt))
		}
		if at, ok := h.tracker.autoAt[id]; ok && r.qualifies() {
			res.autoLatency = append(res.autoLatency, max(at.Sub(r.committedAt), 0))
		}
	}
	h.tracker.mu.Unlock()

	// Dead letters.
	if err := h.checkDeadLetters(ctx, res); err != nil {
		return nil, err
	}

	// The outbox and the queues.
	// The rows left are named (the first 10: id, transaction, insert time),
	// so that the servers' logs can be searched for them.
	var left string
	err = h.pool.QueryRow(ctx, `SELECT
			count(*) FILTER (WHERE state = 'pending'),
			count(*) FILTER (WHERE state = 'pending' AND available_at < now()),
			count(*) FILTER (WHERE state = 'dead'),
			coalesce((SELECT string_agg(format('%s %s (xid %s, inserted %s)', state, id, xmin, inserted_at), ', ')
				FROM (SELECT id, state, xmin, inserted_at FROM `+outboxTable+` ORDER BY id LIMIT 10) r), '')
		FROM `+outboxTable).Scan(&res.pending, &res.stranded, &res.deadRows, &left)
	if err != nil {
		return nil, fmt.Errorf("read the outbox: %w", err)
	}
	if res.pending > 0 || res.deadRows > 0 {
		// With CDC nothing claims a row: every row still pending after
		// the drain is stranded, as its available_at (its insert) is past.
		res.fail("outbox: %d rows pending (%d past their lease or due: stranded), %d dead: %s", res.pending, res.stranded, res.deadRows, left)
	}
	if h.cdc() {
		if err := h.checkSlot(ctx, res); err != nil {
			return nil, err
		}
	}
	if res.queueDepths, err = h.queueDepths(ctx); err != nil {
		return nil, err
	}
	for q, n := range res.queueDepths {
		held := len(res.autoHeld) > 0 && strings.HasPrefix(q, autoQueue)
		if n > 0 && !dlq.IsQueueName(q) && !held {
			res.fail("queue %s still holds %d messages after the drain", q, n)
		}
	}
	for _, f := range h.faults {
		if f.err != "" {
			res.fail("fault %s could not be injected: %s", f.kind, f.err)
		}
		for _, s := range f.stops {
			if p := s.problem(); p != "" {
				res.fail("%s at %s: %s %s", f.kind, f.start.Format("15:04:05"), s.proc, p)
			}
		}
		if !f.recovered {
			res.fail("no recovery within %v after %s (%s)", h.mode.recoveryTimeout, f.kind, f.target)
		}
		for _, p := range f.problems {
			res.fail("%s at %s: %s", f.kind, f.start.Format("15:04:05"), p)
		}
		if f.pressure != nil {
			h.pressureLatencies(f)
		}
	}
	res.hostileSent = len(h.hostile)
	return res, nil
}

// heldByLease reports whether the automation's dedup row for id is a lease
// that has not ended, taken by a worker that was killed while holding it.
func (h *harness) heldByLease(ctx context.Context, id string) (heldEvent, bool) {
	var done bool
	var expires time.Time
	err := h.pool.QueryRow(ctx, `SELECT done_at IS NOT NULL, expires_at FROM warren_dedup WHERE key = $1 AND expires_at > now()`,
		dedup.Key(autoQueue, id)).Scan(&done, &expires)
	if err != nil || done {
		return heldEvent{}, false
	}
	claimed := expires.Add(-automationLease)
	for _, k := range h.killTimes() {
		for _, at := range k {
			// Killed while its handler (timeout 30s) may have been running.
			if !at.Before(claimed.Add(-time.Second)) && at.Before(claimed.Add(31*time.Second)) {
				return heldEvent{id: id, expires: expires}, true
			}
		}
	}
	return heldEvent{}, false
}

// faultsAround lists the faults in force within d of t, for a failure
// that a fault did not explain: the CI log is often all there is to read.
func (h *harness) faultsAround(t time.Time, d time.Duration) string {
	var out []string
	for _, f := range h.faults {
		if f.end.Before(t.Add(-d)) || f.start.After(t.Add(d)) {
			continue
		}
		out = append(out, fmt.Sprintf("%s %s (%s to %s)", f.kind, f.target, f.start.Format("15:04:05.000"), f.end.Format("15:04:05.000")))
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, "; ")
}

// killTimes returns when each process was killed.
func (h *harness) killTimes() map[string][]time.Time {
	out := map[string][]time.Time{}
	for _, f := range h.faults {
		switch f.kind {
		case faultKillRelay, faultKillWebhook, faultKillAutomation:
			out[f.target] = append(out[f.target], f.start)
		}
		for name, at := range f.killed {
			out[name] = append(out[name], at)
		}
	}
	return out
}

// faultWindows returns when each fault of kind was in force.
func (h *harness) faultWindows(kind faultKind) []stall {
	var out []stall
	for _, f := range h.faults {
		if f.kind == kind {
			out = append(out, stall{from: f.start, to: f.end})
		}
	}
	return out
}

func (h *harness) faultTimes(kind faultKind) []time.Time {
	var out []time.Time
	for _, f := range h.faults {
		if f.kind == kind {
			out = append(out, f.start)
		}
	}
	return out
}

// Causes of a duplicate webhook delivery. The webhook's dedup lease makes
// a delivery at-least-once across these, by design: the POST and the
// done-mark cannot be one atomic step.
const (
	causeRedisRestart  = "Redis restart between the deliveries forgot the done-mark"
	causePosterKilled  = "the replica was killed after the receiver's 200 and before the done-mark; the redelivery re-posted once the lease ended"
	causeSenderTimeout = "the slow receiver accepted just as the sender's timeout fired; the sender saw a failure and retried"
	causePosterFrozen  = "the replica was frozen past its lease after the receiver's 200; another replica took the event over"
	causeRedisStalled  = "Redis was stalled or down when the done-mark was due after the receiver's 200"
	causeNodeLost      = "the cluster node holding the replica's connection was lost (kill -9 or stop_app) while the event was in flight; the broker redelivered it"
	causeSendFailed    = "the replica logged its POST as failed (timeout, reset or cancelled) though the receiver had answered 200; it released the key and the retry re-posted"
)

// evidence is what the run recorded that can explain a duplicate
// delivery: the faults, and what the posters logged.
type evidence struct {
	kills         map[string][]time.Time
	stalls        []stall
	redisRestarts []time.Time
	redisStalls   []stall
	losses        []nodeLoss
	// sendFailures: for one event, when each replica logged a POST of it
	// as failed on the sender's side.
	sendFailures map[string][]time.Time
}

// explainDuplicate finds, for each repeated acceptance, a fault that
// explains it; cause is "" when one is unexplained. detail lists the
// acceptances either way.
func explainDuplicate(acc []acceptance, ev evidence) (cause, detail string) {
	acc = slices.Clone(acc)
	slices.SortFunc(acc, func(a, b acceptance) int { return a.at.Compare(b.at) })
	var parts []string
	for _, a := range acc {
		parts = append(parts, a.poster+" at "+a.at.Format("15:04:05.000"))
	}
	detail = strings.Join(parts, ", ")
	var causes []string
	for i := 1; i < len(acc); i++ {
		prev, next := acc[i-1], acc[i]
		var found []string
		for _, r := range ev.redisRestarts {
			if r.After(prev.at) && r.Before(next.at) {
				found = append(found, causeRedisRestart)
				break
			}
		}
		if prev.held >= senderTimeout-time.Second {
			// The receiver counts a delivery only if the request is still
			// open when it answers, but it learns of the client's timeout
			// only once the closed connection is read: an answer held to
			// about the timeout can be counted though the sender gave up.
			found = append(found, causeSenderTimeout)
		}
		for _, k := range killsOf(ev.kills, prev.poster) {
			// Complete follows the 200 within milliseconds, or within its
			// 10s settle timeout while Redis is down.
			if !k.Before(prev.at.Add(-time.Second)) && k.Before(prev.at.Add(12*time.Second)) {
				found = append(found, causePosterKilled)
				break
			}
		}
		for _, s := range ev.redisStalls {
			// The done-mark follows the 200 within milliseconds, or fails
			// within its settle timeout (10s) on a stalled Redis.
			if s.from.Before(prev.at.Add(12*time.Second)) && s.to.After(prev.at) && s.from.Before(next.at) {
				found = append(found, causeRedisStalled)
				break
			}
		}
		for _, s := range ev.stalls {
			if s.proc == prev.poster && !s.from.After(prev.at.Add(time.Second)) && !s.to.Before(prev.at) && s.to.Sub(s.from) > webhookLease {
				found = append(found, causePosterFrozen)
				break
			}
		}
		for _, f := range ev.sendFailures[prev.poster] {
			// The sender gave up on a request the receiver answered: its
			// client timed out or its context ended as the 200 was being
			// written. The failure is logged once the key is released,
			// which is bounded by the store's timeout (10s).
			if !f.Before(prev.at.Add(-time.Second)) && f.Before(prev.at.Add(12*time.Second)) && f.Before(next.at) {
				found = append(found, causeSendFailed)
				break
			}
		}
		for _, l := range ev.losses {
			// The replica was connected to the node, and the node went
			// while the event was in flight there: from the delivery (at
			// most the sender's timeout before the 200) to the done-mark
			// and the ack, which follow the 200 within milliseconds. The
			// dedup should absorb the redelivery (the done-mark is in
			// Redis, which the node's loss does not touch), so this cause
			// alone explaining a duplicate deserves a look.
			onNode := prev.poster == "unknown" || slices.Contains(l.procs, prev.poster)
			if onNode && !l.from.Before(prev.at.Add(-senderTimeout-time.Second)) && l.from.Before(prev.at.Add(2*time.Second)) && l.from.Before(next.at) {
				found = append(found, causeNodeLost)
				break
			}
		}
		if len(found) == 0 {
			return "", detail
		}
		for _, c := range found {
			if !slices.Contains(causes, c) {
				causes = append(causes, c)
			}
		}
	}
	return strings.Join(causes, "; "), detail
}

// killsOf returns the kills that may have hit poster. A poster the
// receiver could not name ("unknown": its process was gone by the time the
// receiver looked its socket up in /proc, which is what a kill just after
// the request does) may have been any replica.
func killsOf(kills map[string][]time.Time, poster string) []time.Time {
	if poster != "unknown" {
		return kills[poster]
	}
	var all []time.Time
	for _, ks := range kills {
		all = append(all, ks...)
	}
	return all
}

// checkDeadLetters reads both DLQs: every hostile message that must die is
// there with the right metadata, and nothing else is.
func (h *harness) checkDeadLetters(ctx context.Context, res *result) error {
	conn, err := amqpx.Dial(ctx, h.amqpURL(), amqpx.DialOptions{Name: "reliability dlq reader"})
	if err != nil {
		return err
	}
	defer conn.Close()
	byID := map[string]hostileMessage{}
	for _, hm := range h.hostile {
		byID[hm.id] = hm
	}
	res.dlqByClass = map[string]int{}
	for _, consumerName := range []string{webhookQueue, autoQueue} {
		q, err := dlqtool.Open(ctx, conn, consumerName)
		if err != nil {
			return err
		}
		msgs, err := q.Peek(ctx, dlqtool.PeekOptions{})
		if err != nil {
			return fmt.Errorf("read %s: %w", q.Name(), err)
		}
		copies := map[string]int{}
		for _, m := range msgs {
			res.dlqByClass[consumerName+" "+string(m.Metadata.Class)]++
			// Needs error text redacted before it leaves the process
			// (finding 1): any reader of the DLQ sees these headers.
			for _, leak := range secretsInHeaders(m.Headers, runSecrets()) {
				res.secretLeaks++
				res.fail("%s: dead letter %q carries the %s", q.Name(), m.MessageId, leak)
			}
			hm, ok := byID[m.MessageId]
			if !ok {
				res.fail("%s holds a dead letter nobody expected: id %q type %q class %s: %s",
					q.Name(), m.EventID, m.EventType, m.Metadata.Class, m.Metadata.Error)
				continue
			}
			want := hm.webhook
			if consumerName == autoQueue {
				want = hm.automation
			}
			if want.class == "" {
				res.fail("%s holds hostile %s (%s), which must not be dead-lettered there", q.Name(), hm.id, hm.kind)
				continue
			}
			copies[hm.id]++
			for _, p := range deadLetterProblems(m.Metadata, want, consumerName, hm.sentAt) {
				res.fail("%s: dead letter %s (%s): %s", q.Name(), hm.id, hm.kind, p)
			}
		}
		for _, hm := range h.hostile {
			want := hm.webhook
			if consumerName == autoQueue {
				want = hm.automation
			}
			if want.class == "" {
				continue
			}
			switch n := copies[hm.id]; {
			case n == 0:
				res.fail("%s: hostile %s (%s) is missing", q.Name(), hm.id, hm.kind)
			case n > 1:
				if why := h.explainDeadLetterCopies(hm, consumerName); why != "" {
					res.dlqDuplicates = append(res.dlqDuplicates, fmt.Sprintf("%s in %s: %d copies (%s)", hm.id, q.Name(), n, why))
				} else {
					res.fail("%s: hostile %s (%s) is there %d times with no fault to explain it", q.Name(), hm.id, hm.kind, n)
				}
			}
		}
		res.dlqChecked += len(msgs)
	}
	return nil
}

// deadLetterProblems lists what is wrong with one dead letter's metadata,
// for a hostile message published at sentAt. Hostile messages are
// published to the exchange with an empty routing key, some with forged
// warren headers; the failure record must be the consumer's own (finding
// 3): one attempt, its queue, the real exchange and key, no forged error,
// and no failure before the message was sent.
func deadLetterProblems(m dlq.Metadata, want fate, consumerName string, sentAt time.Time) []string {
	var out []string
	if m.Class != want.class {
		out = append(out, fmt.Sprintf("class %q, want %q", m.Class, want.class))
	}
	if !strings.Contains(m.Error, want.errSubstr) {
		out = append(out, fmt.Sprintf("error %q does not say %q", m.Error, want.errSubstr))
	}
	if m.Attempts != 1 {
		out = append(out, fmt.Sprintf("attempts %d, want 1", m.Attempts))
	}
	if m.OriginQueue != consumerName || m.Consumer != consumerName {
		out = append(out, fmt.Sprintf("origin queue %q and consumer %q, want %q", m.OriginQueue, m.Consumer, consumerName))
	}
	if m.OriginExchange != exchange || m.OriginRoutingKey != "" {
		out = append(out, fmt.Sprintf("origin exchange %q and routing key %q, want %q and none", m.OriginExchange, m.OriginRoutingKey, exchange))
	}
	if strings.Contains(m.Error, forgedError) {
		out = append(out, fmt.Sprintf("error %q keeps the producer's forged text", m.Error))
	}
	switch {
	case m.Host == "" || m.FirstFailure.IsZero() || m.LastFailure.IsZero():
		out = append(out, "host or failure times missing")
	case m.FirstFailure.Before(sentAt.Add(-time.Minute)):
		// A minute of slack: a retried publish's first copy went out
		// before sentAt.
		out = append(out, fmt.Sprintf("first failure %s, before the message was sent at %s", m.FirstFailure.Format(time.RFC3339), sentAt.Format(time.RFC3339)))
	}
	return out
}

// explainDeadLetterCopies says why a hostile message may be dead twice:
// dead-lettering is publish-confirm-then-ack, so a consumer that loses its
// channel between the two dead-letters the redelivery again.
func (h *harness) explainDeadLetterCopies(hm hostileMessage, consumerName string) string {
	if hm.retried {
		return "its publish was retried"
	}
	for _, f := range h.faults {
		if f.end.Before(hm.sentAt) || f.start.After(hm.sentAt.Add(2*time.Minute)) {
			continue
		}
		switch {
		case f.kind == faultCloseConns, f.kind == faultBrokerRestart, f.kind == faultBrokerOutage, f.kind == faultMemoryAlarm,
			strings.HasPrefix(f.target, consumerName+"-"):
			return fmt.Sprintf("%s at %s, between the dead-letter publish and its ack", f.kind, f.start.Format("15:04:05"))
		case f.kind == faultNodeKill || f.kind == faultNodeStopApp:
			// Only a replica connected to the node lost its channel.
			for _, p := range f.onNode {
				if strings.HasPrefix(p, consumerName+"-") {
					return fmt.Sprintf("%s (node %d) at %s: %s lost its channel between the dead-letter publish and its ack", f.kind, f.node, f.start.Format("15:04:05"), p)
				}
			}
		}
	}
	return ""
}

// scanLogs looks through the processes' logs for crashes, races, the
// signs of a dedup breach, and secrets (the run's secrets are in the
// webhook's configuration and in the errors of its refusing endpoint;
// error text must be redacted before it is logged: finding 1).
func (h *harness) scanLogs(res *result) {
	secrets := runSecrets()
	res.logCounts = map[string]map[string]int{}
	signs := []struct{ label, text string }{
		{"panic", "panic:"},
		{"fatal error", "fatal error:"},
		{"data race", "WARNING: DATA RACE"},
		{"error lines", `"level":"ERROR"`},
		{"error lines", "level=ERROR"},
		{"warn lines", `"level":"WARN"`},
		{"warn lines", "level=WARN"},
		{"second rule run caught by the runs table's key", "automation_runs_pkey"},
		{"done-mark not written after delivery", "done-mark was not written"},
		{"dedup lease expired under a handler", "dedup lease expired"},
	}
	for _, p := range h.procs {
		f, err := os.Open(p.logPath)
		if err != nil {
			continue
		}
		counts := map[string]int{}
		leaks := map[string]int{}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		for sc.Scan() {
			line := sc.Text()
			for _, s := range signs {
				if strings.Contains(line, s.text) {
					counts[s.label]++
				}
			}
			for _, what := range secretsIn(line, secrets) {
				leaks[what]++
			}
		}
		f.Close()
		for _, what := range slices.Sorted(maps.Keys(leaks)) {
			res.secretLeaks += leaks[what]
			res.fail("%s: %d log lines carry the %s (%s)", p.spec.name, leaks[what], what, p.logPath)
		}
		res.logCounts[p.spec.name] = counts
		for _, bad := range []string{"panic", "fatal error", "data race"} {
			if counts[bad] > 0 {
				res.fail("%s: %d × %s in %s", p.spec.name, counts[bad], bad, p.logPath)
			}
		}
		if counts["second rule run caught by the runs table's key"] > 0 {
			res.fail("%s: the automation's dedup let a second run of a handled event through %d times (caught by automation_runs_pkey)",
				p.spec.name, counts["second rule run caught by the runs table's key"])
		}
		for _, e := range p.unexpectedExits() {
			// On a cluster, a process must ride out a node's loss by
			// reconnecting to another node: an exit while a cluster fault
			// is the latest fault is named as such.
			if f := h.nodeFaultBefore(e.at); f != nil {
				res.nodeLossExits = append(res.nodeLossExits, fmt.Sprintf("%s at %s (%s, node %d)", p.spec.name, e.at.Format("15:04:05"), f.kind, f.node))
				res.fail("%s exited at %s, %v after %s (node %d), instead of reconnecting to another node: %s (log: %s)",
					p.spec.name, e.at.Format("15:04:05"), e.at.Sub(f.start).Round(time.Millisecond), f.kind, f.node, e.err, p.logPath)
				continue
			}
			res.fail("%s exited without being killed at %s: %s (log: %s)", p.spec.name, e.at.Format("15:04:05"), e.err, p.logPath)
		}
		if p.spec.kind != "relay" {
			s := res.stats[p.spec.kind]
			s.add(p.stats())
			res.stats[p.spec.kind] = s
		}
		p.mu.Lock()
		res.starts += p.starts
		p.mu.Unlock()
	}
	for name, detail := range h.exitCodes {
		res.fail("%s did not stop cleanly on SIGTERM: %s", name, detail)
	}
}
