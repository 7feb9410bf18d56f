package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/internal/amqpx"
	"github.com/warrenmq/warren/internal/testenv/localrabbit"
	"github.com/warrenmq/warren/relay"
)

// The backpressure episode (issue 35, ADR 028): every automation consumer
// is stopped while the producers keep writing. The relays run with
// --hold-back-queue on both consumers' queues, so the automation queue
// must stop at its high-water mark while the backlog waits in the outbox;
// the broker must raise no alarm, the relays must say which queue holds
// them (the gauge WarrenRelayHeldBack alerts on), and once the consumers
// are back the backlog must drain, every event to both consumers.

const faultBackpressure faultKind = "backpressure: every automation consumer stopped while producers write (relays hold back)"

// holdBackArgs are the relays' hold-back flags (polling relays only: the
// CDC relay refuses them, its slot keeps the backlog instead).
func (h *harness) holdBackArgs() []string {
	return []string{"--hold-back-queue", webhookQueue + "," + autoQueue, "--high-water", strconv.Itoa(h.mode.highWater)}
}

// backpressureRecord is what the episode saw, sampled once a second.
type backpressureRecord struct {
	stopped   time.Duration // how long the automation consumers were down
	highWater int
	// maxDepth: the most ready messages seen in each watched queue.
	maxDepth map[string]int
	// pendingBefore, maxPending: the outbox's pending rows when the
	// consumers stopped, and the most seen while they were down.
	pendingBefore, maxPending int
	// heldFrom: when a relay's /metrics first said the automation queue
	// held it back; heldSamples of samples said so, heldByOther named
	// another queue.
	heldFrom               time.Time
	samples, heldSamples   int
	heldByOther            []string
	alarmReadings, alarmed int
	alarms                 []string
	// webhook: the other consumer's latency (commit to the receiver's
	// acceptance) for the events committed while the automation was down,
	// and for those of the same length of time before it (figured by the
	// report from the tracker).
	webhookDuring, webhookBefore []time.Duration
	// Order in the drain: of the events committed while the automation was
	// down (episode), how many reached an effect more than a second
	// before one committed earlier did (aheadWebhook, aheadAuto of
	// episodeAuto that the rule runs for).
	episode, episodeAuto, aheadWebhook, aheadAuto int
}

// backpressure runs the episode.
func (h *harness) backpressure(ctx context.Context, f *faultRecord) error {
	r := &backpressureRecord{stopped: h.mode.backpressureStop, highWater: h.mode.highWater, maxDepth: map[string]int{}}
	f.pressure = r
	f.target = fmt.Sprintf("%s down %v, high-water mark %d", autoQueue, r.stopped, r.highWater)
	if err := h.pool.QueryRow(ctx, `SELECT count(*) FROM `+outboxTable+` WHERE state = 'pending'`).Scan(&r.pendingBefore); err != nil {
		return err
	}
	var autos []*proc
	for _, p := range h.procs {
		if p.spec.kind == "automation" {
			autos = append(autos, p)
		}
	}
	f.start = time.Now()
	for _, p := range autos {
		f.stops = append(f.stops, p.holdDown(stopGrace(p.spec.kind)))
	}
	defer func() {
		for _, p := range autos {
			p.up()
		}
	}()
	watch := &depthReader{url: h.amqpURL()}
	defer watch.close()
	end := f.start.Add(r.stopped)
	for time.Now().Before(end) && ctx.Err() == nil {
		h.sampleBackpressure(ctx, r, watch)
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
	f.end = time.Now()
	for _, p := range autos {
		p.up()
	}
	for _, p := range autos {
		if err := p.waitReady(ctx, time.Minute); err != nil {
			return err
		}
	}
	bound := r.highWater + overshoot
	if d := r.maxDepth[autoQueue]; d > bound {
		f.problems = append(f.problems, fmt.Sprintf("the %s queue held %d ready messages, past its high-water mark %d and the relays' overshoot (%d)", autoQueue, d, r.highWater, overshoot))
	}
	if r.heldSamples == 0 {
		f.problems = append(f.problems, fmt.Sprintf("no relay said the %s queue held it back (warren_relay_held_back) while its consumers were down", autoQueue))
	}
	if len(r.heldByOther) > 0 {
		f.problems = append(f.problems, "the relays were held back by another queue: "+strings.Join(r.heldByOther, ", "))
	}
	if r.alarmed > 0 {
		f.problems = append(f.problems, fmt.Sprintf("the broker raised an alarm in %d of %d readings: %s", r.alarmed, r.alarmReadings, strings.Join(r.alarms, "; ")))
	}
	if r.alarmReadings == 0 {
		f.problems = append(f.problems, "the broker's alarms could not be read once")
	}
	if r.maxPending <= r.pendingBefore {
		f.problems = append(f.problems, fmt.Sprintf("the outbox's backlog did not grow (%d pending rows before, at most %d during): the producers did not outrun the hold", r.pendingBefore, r.maxPending))
	}
	return nil
}

// overshoot is what the relays may publish past the high-water mark (ADR
// 028): two relays, each with DefaultWorkers claims of DefaultBatchSize
// rows under way when a reading crosses the mark. What they claim until
// their next reading (1s) is part of those claims at this workload's rate.
const overshoot = 2 * relay.DefaultWorkers * relay.DefaultBatchSize

// sampleBackpressure takes one reading of the queues, the outbox, the
// broker's alarms and the relays' hold gauges.
func (h *harness) sampleBackpressure(ctx context.Context, r *backpressureRecord, watch *depthReader) {
	if depths, err := watch.read(ctx, webhookQueue, autoQueue); err == nil {
		for q, n := range depths {
			r.maxDepth[q] = max(r.maxDepth[q], n)
		}
	}
	var pending int
	if h.pool.QueryRow(ctx, `SELECT count(*) FROM `+outboxTable+` WHERE state = 'pending'`).Scan(&pending) == nil {
		r.maxPending = max(r.maxPending, pending)
	}
	if alarms, err := h.brokerAlarms(ctx); err == nil {
		r.alarmReadings++
		if len(alarms) > 0 {
			r.alarmed++
			for _, a := range alarms {
				if !slices.Contains(r.alarms, a) {
					r.alarms = append(r.alarms, a)
				}
			}
		}
	}
	r.samples++
	held := false
	for _, p := range h.procs {
		if p.spec.kind != "relay" {
			continue
		}
		queues, err := heldBackBy(ctx, p.spec.health+"/metrics")
		if err != nil {
			continue
		}
		for _, q := range queues {
			if q == autoQueue {
				held = true
			} else if !slices.Contains(r.heldByOther, q) {
				r.heldByOther = append(r.heldByOther, q)
			}
		}
	}
	if held {
		r.heldSamples++
		if r.heldFrom.IsZero() {
			r.heldFrom = time.Now()
		}
	}
}

// brokerAlarms returns the resource alarms in force on the broker's
// nodes (RabbitMQ's own list; empty when none).
func (h *harness) brokerAlarms(ctx context.Context) ([]string, error) {
	nodes := []*localrabbit.Node{}
	if h.clustered() {
		for i, n := range h.cluster.Nodes() {
			if i != h.nodeDown && i != h.appStopped {
				nodes = append(nodes, n)
			}
		}
	} else {
		nodes = append(nodes, h.rabbit.Node)
	}
	var out []string
	for _, n := range nodes {
		list, err := n.Eval(ctx, "rabbit_alarm:get_alarms().")
		if err != nil {
			return nil, err
		}
		if list = strings.TrimSpace(list); list != "[]" {
			out = append(out, n.Name+": "+list)
		}
	}
	return out, nil
}

// heldBackBy reads a relay's /metrics and returns the queues whose
// warren_relay_held_back gauge is 1: what WarrenRelayHeldBack's
// expression selects.
func heldBackBy(ctx context.Context, url string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var out []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		labels, ok := strings.CutPrefix(line, "warren_relay_held_back{")
		if !ok || !strings.HasSuffix(line, "} 1") {
			continue
		}
		_, rest, ok := strings.Cut(labels, `queue="`)
		if !ok {
			continue
		}
		q, _, _ := strings.Cut(rest, `"`)
		out = append(out, q)
	}
	return out, sc.Err()
}

// depthReader reads queues' ready messages over one connection, redialled
// after a failure.
type depthReader struct {
	url  string
	conn *amqp.Connection
}

func (d *depthReader) read(ctx context.Context, queues ...string) (map[string]int, error) {
	if d.conn == nil || d.conn.IsClosed() {
		conn, err := amqpx.Dial(ctx, d.url, amqpx.DialOptions{Name: "reliability backpressure", Timeout: 5 * time.Second})
		if err != nil {
			return nil, err
		}
		d.conn = conn
	}
	ch, err := d.conn.Channel()
	if err != nil {
		d.close()
		return nil, err
	}
	defer ch.Close()
	out := map[string]int{}
	for _, q := range queues {
		st, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
		if err != nil {
			return nil, fmt.Errorf("queue %s: %w", q, err)
		}
		out[q] = st.Messages
	}
	return out, nil
}

func (d *depthReader) close() {
	if d.conn != nil {
		d.conn.Close()
		d.conn = nil
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// pressureLatencies fills in the webhook's latency during the episode and
// during as long a time before it, from the tracker.
func (h *harness) pressureLatencies(f *faultRecord) {
	r := f.pressure
	before := f.start.Add(-r.stopped)
	h.tracker.mu.Lock()
	defer h.tracker.mu.Unlock()
	for id, e := range h.tracker.events {
		if e.status != statusCommitted {
			continue
		}
		at, ok := h.tracker.webhookAt[id]
		if !ok {
			continue
		}
		switch {
		case !e.committedAt.Before(f.start) && e.committedAt.Before(f.end):
			r.webhookDuring = append(r.webhookDuring, at.Sub(e.committedAt))
		case !e.committedAt.Before(before) && e.committedAt.Before(f.start):
			r.webhookBefore = append(r.webhookBefore, at.Sub(e.committedAt))
		}
	}
	slices.Sort(r.webhookDuring)
	slices.Sort(r.webhookBefore)
	var during []*eventRecord
	for _, e := range h.tracker.events {
		if e.status == statusCommitted && !e.committedAt.Before(f.start) && e.committedAt.Before(f.end) {
			during = append(during, e)
		}
	}
	slices.SortFunc(during, func(a, b *eventRecord) int { return a.committedAt.Compare(b.committedAt) })
	r.episode = len(during)
	r.aheadWebhook = aheadOfOrder(during, h.tracker.webhookAt)
	var auto []*eventRecord
	for _, e := range during {
		if e.qualifies() {
			auto = append(auto, e)
		}
	}
	r.episodeAuto = len(auto)
	r.aheadAuto = aheadOfOrder(auto, h.tracker.autoAt)
}

// aheadOfOrder counts the events (in commit order) that reached their
// effect (at) more than a second before an event committed earlier did:
// the drain's departures from the outbox's order beyond the parallelism
// of two relays and two replicas.
func aheadOfOrder(inOrder []*eventRecord, at map[string]time.Time) int {
	var latest time.Time
	n := 0
	for _, e := range inOrder {
		t, ok := at[e.id]
		if !ok {
			continue
		}
		if t.Before(latest.Add(-time.Second)) {
			n++
		}
		if t.After(latest) {
			latest = t
		}
	}
	return n
}

// backpressureMarkdown is the report's account of the episodes.
func (r *result) backpressureMarkdown(w func(string, ...any)) {
	if r.relays == relayCDC {
		return
	}
	var eps []*faultRecord
	for _, f := range r.faults {
		if f.pressure != nil {
			eps = append(eps, f)
		}
	}
	if len(eps) == 0 {
		return
	}
	w("## Backpressure\n\n")
	w("The relays run with `--hold-back-queue %s,%s --high-water %d` (the low-water mark is half of it; ADR 028). The episode stops both automation consumers with SIGTERM for %v and keeps them down while the workload goes on, reading once a second each queue's ready messages, the outbox's pending rows, RabbitMQ's alarm list (`rabbit_alarm:get_alarms()` on every node) and each relay's `/metrics`, whose `warren_relay_held_back{queue}` is what the **WarrenRelayHeldBack** alert selects. ",
		webhookQueue, autoQueue, r.mode.highWater, r.mode.backpressureStop)
	w("It fails the run if the automation queue passes the mark by more than the relays' claims in flight (%d: two relays × `relay.DefaultWorkers` × `relay.DefaultBatchSize`), if no relay names `%s` as the queue holding it back, or names another, if the broker raises an alarm, or if the backlog does not grow in the outbox. Nothing may be lost or expire into a DLQ (the run's own checks), and the consumers must catch up when they are back.\n\n", overshoot, autoQueue)
	w("Every consumer waits with the slowest on purpose (ADR 028): the webhook, healthy throughout, gets nothing new once the relays hold, so its latency for the events committed during the episode is about the episode's length, against its usual latency before it. *Drain*: the events not yet at both effects when the consumers came back, and the time until all were. *Out of order*: of the events committed during the episode (and of those the automation rule runs for), how many reached the effect more than a second before one committed earlier did; the relays claim the outbox oldest first, and two relays and two replicas of each consumer work in parallel.\n\n")
	w("| episode | automation queue, most ready | webhook queue, most ready | outbox pending rows (before / most) | held back by `%s` | broker alarms | webhook latency during (p50 / max) | webhook latency before (p50 / max) | drain: backlog, catch-up, rate | out of order (webhook; automation) |\n|---|---:|---:|---|---|---|---|---|---|---|\n", autoQueue)
	for _, f := range eps {
		p := f.pressure
		held := "never"
		if !p.heldFrom.IsZero() {
			held = fmt.Sprintf("from %s after the stop, %d of %d readings", fmtDur(p.heldFrom.Sub(f.start)), p.heldSamples, p.samples)
		}
		alarms := fmt.Sprintf("none in %d readings", p.alarmReadings)
		if p.alarmed > 0 {
			alarms = fmt.Sprintf("**%d of %d readings**: %s", p.alarmed, p.alarmReadings, strings.Join(p.alarms, "; "))
		}
		drain := "not caught up by the end"
		if f.caughtUp && f.catchUp > 0 {
			drain = fmt.Sprintf("%d events, %s, %.0f/s", f.backlog, fmtDur(f.catchUp), float64(f.backlog)/f.catchUp.Seconds())
		}
		w("| %s, down %v | %d (mark %d) | %d | %d / %d | %s | %s | %s / %s | %s / %s | %s | %d of %d; %d of %d |\n",
			f.start.Format("15:04:05"), p.stopped, p.maxDepth[autoQueue], p.highWater, p.maxDepth[webhookQueue], p.pendingBefore, p.maxPending, held, alarms,
			fmtDur(percentile(p.webhookDuring, 0.5)), fmtDur(percentile(p.webhookDuring, 1)),
			fmtDur(percentile(p.webhookBefore, 0.5)), fmtDur(percentile(p.webhookBefore, 1)), drain,
			p.aheadWebhook, p.episode, p.aheadAuto, p.episodeAuto)
	}
	w("\n")
}
