package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"syscall"
	"time"
)

// faultKind names one kind of fault.
type faultKind string

const (
	faultKillRelay      faultKind = "kill -9 relay"
	faultKillWebhook    faultKind = "kill -9 webhook consumer"
	faultKillAutomation faultKind = "kill -9 automation consumer"
	faultStallRelay     faultKind = "relay frozen past its lease (SIGSTOP)"
	faultStallWebhook   faultKind = "webhook frozen past its dedup lease (SIGSTOP)"
	faultCloseConns     faultKind = "broker: close_all_connections"
	faultBrokerRestart  faultKind = "broker: stop_app / start_app"
	faultPGTerminate    faultKind = "Postgres: pg_terminate_backend (all)"
	faultRedisRestart   faultKind = "Redis crashed and restarted (marks lost)"
	faultReceiver5xx    faultKind = "receiver answering 503"
	faultReceiverSlow   faultKind = "receiver slow (up to 12s; sender timeout 10s)"
	faultHostile        faultKind = "hostile input burst"
	faultMemoryAlarm    faultKind = "broker memory alarm, every relay and consumer stopped (SIGTERM) while it holds"
	faultDLQImport      faultKind = "dead letters moved back: dlq export + import --to origin (failure record reset), handler fails once"
	faultDLQShovel      faultKind = "dead letters moved back: shovel DLQ → origin (x-death kept), handler fails once"
	faultPGStall        faultKind = "Postgres stalled (server SIGSTOP)"
	faultRedisStall     faultKind = "Redis stalled (server SIGSTOP)"
	faultRedisDown      faultKind = "Redis down (connections refused), marks lost"
	faultBrokerOutage   faultKind = "broker stopped for an outage (stop_app … start_app)"
	faultPGRestart      faultKind = "Postgres restarted under load (fast shutdown, start)"
	faultCaptureSchema  faultKind = "captured table: partition created, column added and renamed under writes, capture installed again"
	// The cluster's faults are in cluster.go, the CDC mode's large
	// transaction in largetx.go.
)

// faultIDs are the short names -faults selects kinds by.
var faultIDs = map[string]faultKind{
	"kill-relay": faultKillRelay, "kill-webhook": faultKillWebhook, "kill-automation": faultKillAutomation,
	"stall-relay": faultStallRelay, "stall-webhook": faultStallWebhook, "close-conns": faultCloseConns,
	"broker-restart": faultBrokerRestart, "pg-terminate": faultPGTerminate, "redis-restart": faultRedisRestart,
	"receiver-5xx": faultReceiver5xx, "receiver-slow": faultReceiverSlow, "hostile": faultHostile,
	"memory-alarm": faultMemoryAlarm, "dlq-import": faultDLQImport, "dlq-shovel": faultDLQShovel,
	"pg-stall": faultPGStall, "redis-stall": faultRedisStall, "redis-down": faultRedisDown,
	"broker-outage": faultBrokerOutage, "pg-restart": faultPGRestart, "capture-schema": faultCaptureSchema,
	"backpressure": faultBackpressure,
	// -broker cluster only; each brings its node back right after.
	"node-kill": faultNodeKill, "node-stop-app": faultNodeStopApp,
	// -relay-mode cdc only.
	"cdc-large-tx": faultLargeTx,
}

// faultOrder is the order of the report's rows.
var faultOrder = []faultKind{
	faultKillRelay, faultKillWebhook, faultKillAutomation, faultStallRelay, faultStallWebhook,
	faultCloseConns, faultBrokerRestart, faultPGTerminate, faultRedisRestart,
	faultReceiver5xx, faultReceiverSlow, faultHostile,
	faultMemoryAlarm, faultDLQImport, faultDLQShovel, faultPGStall, faultRedisStall, faultRedisDown,
	faultBrokerOutage, faultPGRestart, faultCaptureSchema, faultBackpressure, faultLargeTx,
	faultNodeKill, faultNodeRestart, faultNodeStopApp, faultNodeStartApp,
}

// faultRecord is one injected fault and how the system came back from it.
type faultRecord struct {
	kind       faultKind
	target     string
	start, end time.Time // end: when the fault was lifted (start for instant faults)
	err        string    // the injection itself failed
	note       string    // the moment the fault hit, when it was chosen

	// Recovery: from end until an event committed after end had reached
	// both consumers' effects (the probe).
	probeID   string
	recovery  time.Duration
	recovered bool

	// readyAgain: for kills, from the kill until the restarted process
	// answered /readyz.
	readyAgain time.Duration

	// catchUp: from end until every event committed before end had
	// reached both consumers' effects (the backlog the fault left).
	backlog  int
	catchUp  time.Duration
	caughtUp bool

	// moved: ids of dead letters the fault moved back to their queue;
	// catch-up waits for the receiver to accept them too.
	moved []string
	// stops: for faults that stop processes with SIGTERM, how each stop
	// went; killed: when a process needed SIGKILL (it explains a
	// duplicate like a kill does, and fails the run).
	stops  []stopRecord
	killed map[string]time.Time

	// node: for the cluster faults, the node's index; onNode: the
	// processes that held a connection to it when it went.
	node   int
	onNode []string

	// slot: in cdc mode, what the replication slot did around the fault.
	slot *slotRecord
	// large: what the large-transaction fault saw (cdc mode).
	large *largeTxRecord
	// pressure: what the backpressure episode saw.
	pressure *backpressureRecord
	// problems: the fault's own checks that failed (each fails the run).
	problems []string
}

// schedule returns the faults of a run in random order, each cluster
// fault followed at once by the one that undoes it.
func schedule(rng *rand.Rand, counts map[faultKind]int) []faultKind {
	var out []faultKind
	for _, k := range faultOrder {
		for range counts[k] {
			out = append(out, k)
		}
	}
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	var plan []faultKind
	for _, k := range out {
		plan = append(plan, k)
		if undo, ok := undoFault[k]; ok {
			plan = append(plan, undo)
		}
	}
	return plan
}

// inject applies one fault and returns when it has been lifted.
func (h *harness) inject(ctx context.Context, kind faultKind) *faultRecord {
	f := &faultRecord{kind: kind, start: time.Now()}
	var err error
	pick := func(kindName string) *proc {
		var ps []*proc
		for _, p := range h.procs {
			if p.spec.kind == kindName {
				ps = append(ps, p)
			}
		}
		return ps[h.rng.IntN(len(ps))]
	}
	pause := func(d time.Duration) {
		select {
		case <-ctx.Done():
		case <-time.After(d):
		}
	}
	switch kind {
	case faultKillRelay, faultKillWebhook, faultKillAutomation:
		p := pick(map[faultKind]string{faultKillRelay: "relay", faultKillWebhook: "webhook", faultKillAutomation: "automation"}[kind])
		f.target = p.spec.name
		var killedAt time.Time
		switch {
		case kind == faultKillRelay:
			p, f.note = h.aimAtRelay(ctx, p)
			f.target = p.spec.name
		case kind == faultKillWebhook && h.rng.IntN(2) == 0:
			f.note, killedAt = h.afterDelivery(ctx, p)
		}
		f.start = time.Now()
		if killedAt.IsZero() {
			err = p.kill()
		} else {
			f.start = killedAt
		}
		if err == nil {
			// The supervisor restarts it; time its way back.
			h.bg.Go(func() {
				if p.waitReady(ctx, 2*time.Minute) == nil {
					f.readyAgain = time.Since(f.start)
				}
			})
		}
	case faultStallRelay, faultStallWebhook:
		p, d := pick("relay"), h.mode.relayLease+3*time.Second
		if kind == faultStallWebhook {
			p, d = pick("webhook"), webhookLease+15*time.Second
		}
		if kind == faultStallRelay {
			p, f.note = h.aimAtRelay(ctx, p)
		}
		f.target = fmt.Sprintf("%s for %v", p.spec.name, d)
		f.start = time.Now()
		if err = p.signal(syscall.SIGSTOP); err == nil {
			h.stalls = append(h.stalls, stall{proc: p.spec.name, from: time.Now(), to: time.Now().Add(d)})
			pause(d)
			err = p.signal(syscall.SIGCONT)
			h.stalls[len(h.stalls)-1].to = time.Now()
		}
	case faultCloseConns:
		if h.clustered() {
			f.target = "on every node"
		}
		err = h.eachNode(ctx, "close_all_connections", "reliability fault")
	case faultBrokerRestart:
		f.target = fmt.Sprintf("down %v", h.mode.brokerDown)
		if err = h.rabbit.ctl(ctx, "stop_app"); err == nil {
			pause(h.mode.brokerDown)
			err = h.rabbit.ctl(ctx, "start_app")
		}
	case faultBrokerOutage:
		f.target = fmt.Sprintf("down %v", h.mode.brokerOutage)
		h.slotBefore(ctx, f)
		if err = h.rabbit.ctl(ctx, "stop_app"); err == nil {
			h.holdSampling(ctx, h.mode.brokerOutage, f)
			err = h.rabbit.ctl(ctx, "start_app")
		}
	case faultPGRestart:
		h.slotBefore(ctx, f)
		var down time.Duration
		down, err = h.pg.Restart(ctx)
		f.target = fmt.Sprintf("refused connections for %v", down.Round(100*time.Millisecond))
		if err == nil {
			h.slotAfterRestart(ctx, f)
		}
	case faultPGTerminate:
		var n int
		err = h.withAdmin(ctx, func(ctx context.Context) error {
			return h.admin.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
				WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()`).Scan(&n)
		})
		f.target = fmt.Sprintf("%d backends", n)
	case faultRedisRestart:
		f.target = fmt.Sprintf("down %v", h.mode.redisDown)
		h.redis.Crash()
		pause(h.mode.redisDown)
		err = h.redis.Restart(ctx)
	case faultReceiver5xx:
		f.target = fmt.Sprint(h.mode.receiverFail)
		h.recv.failFor(h.mode.receiverFail)
		pause(h.mode.receiverFail)
	case faultReceiverSlow:
		f.target = fmt.Sprint(h.mode.receiverSlow)
		h.recv.slowFor(h.mode.receiverSlow, 12*time.Second)
		pause(h.mode.receiverSlow)
	case faultMemoryAlarm:
		f.target, f.note, err = h.memoryAlarm(ctx, f)
	case faultDLQImport, faultDLQShovel:
		f.target, f.moved, err = h.moveDeadLetters(ctx, kind == faultDLQShovel)
	case faultPGStall:
		f.target = fmt.Sprintf("for %v", h.mode.pgStall)
		if err = h.pg.Pause(); err == nil {
			pause(h.mode.pgStall)
			err = h.pg.Resume()
		}
	case faultRedisStall:
		f.target = fmt.Sprintf("for %v", h.mode.redisStall)
		if err = h.redis.Pause(); err == nil {
			pause(h.mode.redisStall)
			err = h.redis.Resume()
		}
	case faultRedisDown:
		f.target = fmt.Sprintf("down %v", h.mode.redisOutage)
		h.redis.Crash()
		pause(h.mode.redisOutage)
		err = h.redis.Restart(ctx)
	case faultCaptureSchema:
		f.target, f.note, err = h.captureSchemaChange(ctx, pause)
	case faultNodeKill, faultNodeRestart, faultNodeStopApp, faultNodeStartApp:
		err = h.injectNodeFault(ctx, f)
	case faultBackpressure:
		err = h.backpressure(ctx, f)
	case faultLargeTx:
		err = h.largeTx(ctx, f)
		if r := f.large; r != nil {
			f.target = fmt.Sprintf("%d events, %d session ends (%d kill -9, %d SIGTERM), killed at the gate with %d trimmed", r.events, r.ends, r.kills, r.ends-r.kills, r.gateTrimmed)
		}
	case faultHostile:
		h.hostileBursts++
		var sent []hostileMessage
		sent, err = sendHostile(ctx, h.amqpURL(), exchange, h.runID, h.hostileBursts, h.recv.failOnce)
		h.hostile = append(h.hostile, sent...)
		f.target = fmt.Sprintf("%d messages", len(sent))
	}
	f.end = time.Now()
	if err != nil {
		f.err = err.Error()
	}
	return f
}

// measure times the system's return from f: the probe's end-to-end
// delivery now, and the backlog's in the background.
func (h *harness) measure(ctx context.Context, f *faultRecord) {
	if h.cdc() {
		h.slotAtLift(ctx, f)
	}
	backlog := h.tracker.outstanding()
	f.backlog = len(backlog)
	h.bg.Go(func() {
		for {
			if len(h.tracker.remaining(backlog)) == 0 && h.recv.hasAll(f.moved) {
				f.catchUp, f.caughtUp = time.Since(f.end), true
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	})
	pctx, cancel := context.WithTimeout(ctx, h.mode.recoveryTimeout)
	defer cancel()
	id, _, err := h.wl.probe(pctx)
	if err != nil {
		return
	}
	f.probeID = id
	for !h.tracker.complete(id) {
		select {
		case <-pctx.Done():
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
	f.recovery, f.recovered = time.Since(f.end), true
	if h.cdc() {
		h.awaitSlot(ctx, f)
	}
}

// aimAtRelay picks the relay a relay fault hits, and says where it hit:
// the polling relays are aimed at between a claim and its settle (p,
// while it holds claimed rows), the CDC relays at the one streaming the
// slot (a standby has nothing in flight to lose).
func (h *harness) aimAtRelay(ctx context.Context, p *proc) (*proc, string) {
	if h.cdc() {
		return h.whileStreaming(ctx, p)
	}
	return p, h.whileClaiming(ctx, p.spec.name)
}

// whileClaiming waits (up to 3s) until relay holds claimed rows, so the
// fault hits between a claim and its settle: the rows must then wait out
// the lease and be published by the other relay, and a publish confirmed
// but never settled is published again.
func (h *harness) whileClaiming(ctx context.Context, relay string) string {
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		var n int
		err := h.pool.QueryRow(ctx, `SELECT count(*) FROM `+outboxTable+`
			WHERE state = 'pending' AND claimed_by = $1 AND available_at > now()`, relay).Scan(&n)
		if err == nil && n > 0 {
			return fmt.Sprintf("holding %d claimed rows", n)
		}
	}
	return "holding no claim"
}

// afterDelivery arranges for the webhook replica to be killed the moment
// the receiver has accepted one of its deliveries, before the replica can
// write its done-mark, and waits (up to 5s) for that moment. It returns
// when the replica has exited, and the time of the kill (zero if no
// delivery came, and nothing was killed).
func (h *harness) afterDelivery(ctx context.Context, p *proc) (string, time.Time) {
	p.mu.Lock()
	exited := p.exited
	p.mu.Unlock()
	hit := make(chan time.Time, 1)
	h.recv.mu.Lock()
	h.recv.afterAccept = func(poster string) bool {
		if poster != p.spec.name {
			return false
		}
		at := time.Now()
		p.signal(syscall.SIGKILL)
		hit <- at
		return true
	}
	h.recv.mu.Unlock()
	disarm := func() {
		h.recv.mu.Lock()
		h.recv.afterAccept = nil
		h.recv.mu.Unlock()
	}
	select {
	case at := <-hit:
		<-exited
		return "right after the receiver accepted its delivery", at
	case <-time.After(5 * time.Second):
	case <-ctx.Done():
	}
	disarm()
	select {
	case at := <-hit: // it fired while disarming
		<-exited
		return "right after the receiver accepted its delivery", at
	default:
		return "no delivery within 5s; killed at a random point", time.Time{}
	}
}

// stall is a time a process was frozen.
type stall struct {
	proc     string
	from, to time.Time
}
