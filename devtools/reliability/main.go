package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/warrenmq/warren/consumer"
	"github.com/warrenmq/warren/examples/app"
	"github.com/warrenmq/warren/internal/httpserver"
	"github.com/warrenmq/warren/internal/testenv/localrabbit"
)

// Names on the private services. Nothing else uses these services, so the
// names need not be unique.
const (
	exchange      = "reliability.events"
	webhookQueue  = "webhook"
	autoQueue     = "automation"
	outboxTable   = "warren_outbox"
	webhookSecret = "reliability-secret"
	// webhookLease is the webhook service's dedup lease (webhook.Config's
	// default; the command does not change it).
	webhookLease = time.Minute
	// automationLease is the automation's dedup lease (middleware's
	// DefaultLease; the command does not change it).
	automationLease = 5 * time.Minute
	// senderTimeout is the webhook's timeout for one POST (webhook.Config's
	// default; the command does not change it).
	senderTimeout = 10 * time.Second
)

// mode is the size of a run.
type mode struct {
	name           string
	rate           float64 // application transactions per second
	captureRate    float64 // transactions per second writing the captured table (capture.go)
	workers        int
	rollbackPct    int
	warmup         time.Duration
	faultPhase     time.Duration // faults stop being injected after this
	gapMin, gapMax time.Duration // pause between faults
	counts         map[faultKind]int
	// clusterCounts are the cluster's faults (-broker cluster), each
	// followed by the fault that brings its node back.
	clusterCounts map[faultKind]int
	// cdcCounts are the CDC mode's own faults (-relay-mode cdc).
	cdcCounts map[faultKind]int
	// retryDelays are the consumers' retry tiers (WARREN_RETRY_DELAYS). An
	// event the receiver refuses at four attempts waits in the last one,
	// and the drain must outlast it, or such an event, not lost, would
	// count as undelivered.
	retryDelays     []time.Duration
	recoveryTimeout time.Duration
	drainTimeout    time.Duration
	quiet           time.Duration
	relayLease      time.Duration
	brokerDown      time.Duration
	brokerOutage    time.Duration // the broker stopped for an outage (the "a minute")
	redisDown       time.Duration
	receiverFail    time.Duration
	receiverSlow    time.Duration
	alarmHold       time.Duration // memory alarm in force before the SIGTERMs
	pgStall         time.Duration
	redisStall      time.Duration
	redisOutage     time.Duration
	// backpressureStop is how long the backpressure episode keeps the
	// automation consumers down; highWater the relays' --high-water.
	backpressureStop time.Duration
	highWater        int
}

var modes = map[string]mode{
	// The short mode's phase is shorter than one pass over its fault
	// kinds: past it only kinds not yet injected run (see runAll), so a
	// CI run injects each kind once and repeats only what fits in 90s.
	// The long mode repeats them for 32 minutes.
	"short": {
		name: "short", rate: 16, captureRate: 2, workers: 4, rollbackPct: 8,
		warmup: 5 * time.Second, faultPhase: 90 * time.Second, gapMin: 500 * time.Millisecond, gapMax: 2 * time.Second,
		counts: map[faultKind]int{
			faultKillRelay: 5, faultKillWebhook: 5, faultKillAutomation: 4, faultStallRelay: 2,
			faultCloseConns: 2, faultBrokerRestart: 2, faultPGTerminate: 3, faultRedisRestart: 2,
			faultReceiver5xx: 2, faultReceiverSlow: 2, faultHostile: 2,
			faultMemoryAlarm: 1, faultDLQImport: 1, faultDLQShovel: 1, faultPGStall: 1, faultRedisStall: 1, faultRedisDown: 1,
			faultBrokerOutage: 1, faultPGRestart: 2, faultCaptureSchema: 1, faultBackpressure: 1,
		},
		clusterCounts: map[faultKind]int{faultNodeKill: 2, faultNodeStopApp: 1},
		cdcCounts:     map[faultKind]int{faultLargeTx: 1},
		// The default tiers but the last: 2m, not 10m. The receiver's
		// failure windows (two 503s, two slow answers, the memory
		// alarm's) fall close enough in 90s that an event can be refused
		// at four attempts (t, t+1s, t+11s, t+71s; a CI run saw two), and
		// it then waits out the last tier. Faults run one after another,
		// each over before the next, so every window has ended when the
		// drain starts, and the drain, 2m30s, outlasts that wait. A fifth
		// refusal (yet another window, 2m after the fourth) dead-letters
		// the event as exhausted, and the drain replays it (see
		// replayExhausted).
		retryDelays:     []time.Duration{time.Second, 10 * time.Second, time.Minute, 2 * time.Minute},
		recoveryTimeout: 90 * time.Second, drainTimeout: 2*time.Minute + 30*time.Second, quiet: 5 * time.Second,
		// The outage is 15s, not the long mode's minute: long enough for
		// the slot's lag to grow well past its steady level, short enough
		// for CI.
		relayLease: 5 * time.Second, brokerDown: 3 * time.Second, brokerOutage: 15 * time.Second, redisDown: time.Second,
		receiverFail: 6 * time.Second, receiverSlow: 8 * time.Second,
		// The short mode's stalls outlast the relay's lease, not the
		// webhook's (1m) or the automation's (5m); its outage outlasts
		// the first two retry tiers, not all four (3m11s).
		alarmHold: 4 * time.Second, pgStall: 8 * time.Second, redisStall: 8 * time.Second, redisOutage: 15 * time.Second,
		// Long enough for the automation queue to pass the mark and the
		// relays to hold for a while.
		backpressureStop: 30 * time.Second, highWater: 200,
	},
	"long": {
		name: "long", rate: 20, captureRate: 2, workers: 4, rollbackPct: 8,
		warmup: 10 * time.Second, faultPhase: 32 * time.Minute, gapMin: time.Second, gapMax: 4 * time.Second,
		counts: map[faultKind]int{
			faultKillRelay: 20, faultKillWebhook: 20, faultKillAutomation: 15, faultStallRelay: 6, faultStallWebhook: 2,
			faultCloseConns: 6, faultBrokerRestart: 5, faultPGTerminate: 8, faultRedisRestart: 5,
			faultReceiver5xx: 4, faultReceiverSlow: 4, faultHostile: 4,
			faultMemoryAlarm: 3, faultDLQImport: 2, faultDLQShovel: 2, faultPGStall: 2, faultRedisStall: 2, faultRedisDown: 1,
			faultBrokerOutage: 2, faultPGRestart: 4, faultCaptureSchema: 3, faultBackpressure: 1,
		},
		clusterCounts:   map[faultKind]int{faultNodeKill: 6, faultNodeStopApp: 4},
		cdcCounts:       map[faultKind]int{faultLargeTx: 2},
		retryDelays:     consumer.DefaultRetryDelays,
		recoveryTimeout: 3 * time.Minute, drainTimeout: max(automationLease, slices.Max(consumer.DefaultRetryDelays)) + 2*time.Minute, quiet: 20 * time.Second,
		relayLease: 5 * time.Second, brokerDown: 10 * time.Second, brokerOutage: time.Minute, redisDown: 3 * time.Second,
		receiverFail: 25 * time.Second, receiverSlow: 20 * time.Second,
		// Stalls outlast every lease (relay 5s, webhook 1m, automation 5m);
		// the outage outlasts every retry tier together.
		alarmHold: 10 * time.Second, pgStall: automationLease + 15*time.Second, redisStall: webhookLease + 15*time.Second,
		redisOutage: sum(consumer.DefaultRetryDelays) + 20*time.Second,
		// The ten minutes; the mark is reached within the first.
		backpressureStop: 10 * time.Minute, highWater: 1000,
	},
}

// selectFaults keeps the kinds named in spec ("memory-alarm,dlq-import=2"),
// each with its count in counts (at least 1) or the one given.
func selectFaults(spec string, counts map[faultKind]int) (map[faultKind]int, error) {
	out := map[faultKind]int{}
	for _, item := range strings.Split(spec, ",") {
		name, n, hasN := strings.Cut(strings.TrimSpace(item), "=")
		kind, ok := faultIDs[name]
		if !ok {
			var known []string
			for id := range faultIDs {
				known = append(known, id)
			}
			slices.Sort(known)
			return nil, fmt.Errorf("unknown fault %q (known: %s)", name, strings.Join(known, ", "))
		}
		count := max(counts[kind], 1)
		if hasN {
			c, err := strconv.Atoi(n)
			if err != nil || c < 1 {
				return nil, fmt.Errorf("%s: count %q is not a positive number", name, n)
			}
			count = c
		}
		out[kind] = count
	}
	return out, nil
}

// harness owns everything a run starts.
type harness struct {
	mode    mode
	relays  relayMode
	broker  brokerMode
	runID   string
	dir     string
	verbose bool
	race    bool
	rng     *rand.Rand
	started time.Time

	rabbit  *rabbit              // -broker single
	cluster *localrabbit.Cluster // -broker cluster
	pg      *postgres
	redis   *redisServer

	admin   *pgx.Conn // kept out of pg_terminate_backend's way
	pool    *pgxpool.Pool
	recv    *receiver
	recvURL string
	// endpoints are the webhook's hostile endpoints: a redirecting one and
	// one whose URL carries secrets.
	endpoints *hostileEndpoints
	tracker   *tracker
	wl        *workload
	ruleID    int64
	procs     []*proc

	bg            sync.WaitGroup // measurement goroutines
	faults        []*faultRecord
	stalls        []stall
	hostile       []hostileMessage
	hostileBursts int
	movedBatches  int
	moved         []string // dead letters moved back to the webhook queue
	// replayed counts, per consumer, the committed events the drain
	// replayed from its DLQ after they exhausted their retries.
	replayed map[string]int
	// replayProblems are the replayed events that exhausted their
	// retries sooner than the tiers allow.
	replayProblems []string
	timings        map[string]time.Duration
	exitCodes      map[string]string // graceful stop results
	// stopLSN is the server's WAL position when the workload stopped
	// (cdc mode): the drain waits for the slot to pass it.
	stopLSN int64
	// nodeDown and appStopped: the cluster node a cluster fault killed or
	// stopped the application of, until the fault after it brings it
	// back; -1 for none.
	nodeDown, appStopped int
	// captureChanges counts the capture schema faults: each adds column
	// added_N and renames label_N-1 to label_N.
	captureChanges int
}

func main() {
	modeName := flag.String("mode", "short", "short (CI, under 5 minutes) or long (release checks; writes docs/reliability/RELIABILITY.md)")
	broker := flag.String("broker", string(brokerSingle), "single: one private RabbitMQ node; cluster: a private three-node cluster, every process given all three URLs, quorum queues, and node kills, restarts and stop_apps among the faults (long: docs/reliability/RELIABILITY-cluster.md)")
	relays := flag.String("relay-mode", string(relayPoll), "poll: the relays claim rows from the outbox table; cdc: they stream it from a logical replication slot (warren relay run --mode cdc), one streaming and one standing by")
	out := flag.String("out", "", "write the report here (default: docs/reliability/RELIABILITY.md in long mode, the run directory in short mode)")
	seed := flag.Uint64("seed", 0, "random seed for the fault schedule and the workload (default: from the clock)")
	keep := flag.Bool("keep", false, "keep the run directory (logs, service data) even when the run passes")
	race := flag.Bool("race", false, "build the service binaries with the race detector")
	verbose := flag.Bool("v", false, "log every fault as it happens")
	faultPhase := flag.Duration("fault-phase", 0, "inject faults for this long instead of the mode's default (short 90s, long 32m)")
	only := flag.String("faults", "", "inject only these fault kinds, comma-separated short names (memory-alarm,dlq-import,…), each with the mode's count or name=N")
	flag.Parse()
	m, ok := modes[*modeName]
	if !ok {
		fmt.Fprintf(os.Stderr, "reliability: unknown -mode %q (want short or long)\n", *modeName)
		os.Exit(2)
	}
	rm := relayMode(*relays)
	if rm != relayPoll && rm != relayCDC {
		fmt.Fprintf(os.Stderr, "reliability: unknown -relay-mode %q (want poll or cdc)\n", *relays)
		os.Exit(2)
	}
	bm := brokerMode(*broker)
	if bm != brokerSingle && bm != brokerCluster {
		fmt.Fprintf(os.Stderr, "reliability: unknown -broker %q (want single or cluster)\n", *broker)
		os.Exit(2)
	}
	if *faultPhase > 0 {
		m.faultPhase = *faultPhase
	}
	if rm == relayCDC {
		m.counts = cdcCounts(m)
	}
	if bm == brokerCluster {
		m.counts = clusterCounts(m)
	}
	if *only != "" {
		counts, err := selectFaults(*only, m.counts)
		if err == nil {
			err = checkBrokerFaults(bm, counts)
		}
		if err == nil {
			err = checkRelayFaults(rm, counts)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "reliability: -faults: %v\n", err)
			os.Exit(2)
		}
		m.counts = counts
	}
	if *seed == 0 {
		*seed = uint64(time.Now().UnixNano())
	}
	if *out == "" && m.name == "long" {
		// The evidence file the README links, wherever the run starts from.
		root, err := moduleRoot(context.Background())
		if err != nil {
			fmt.Fprintf(os.Stderr, "reliability: %v\n", err)
			os.Exit(1)
		}
		*out = filepath.Join(root, "docs", "reliability", reportName(rm, bm))
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop() // a second signal kills at once
	}()
	code := run(ctx, m, rm, bm, *seed, *out, *keep, *race, *verbose)
	stop()
	os.Exit(code)
}

// extraFlags are the flags given that change what a run does beyond its
// modes, as they were given: a report says how to run it again.
func extraFlags() string {
	var out []string
	flag.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "faults", "fault-phase":
			out = append(out, " -"+f.Name+" "+f.Value.String())
		}
	})
	return strings.Join(out, "")
}

func (h *harness) logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "reliability %6.1fs: %s\n", time.Since(h.started).Seconds(), fmt.Sprintf(format, args...))
}

func run(ctx context.Context, m mode, rm relayMode, bm brokerMode, seed uint64, out string, keep, race, verbose bool) int {
	h := &harness{
		mode: m, relays: rm, broker: bm, nodeDown: -1, appStopped: -1, verbose: verbose, race: race, rng: rand.New(rand.NewPCG(seed, seed^0x5eed)), started: time.Now(),
		runID: fmt.Sprintf("r%d", time.Now().Unix()%100000), tracker: newTracker(),
		timings: map[string]time.Duration{}, exitCodes: map[string]string{},
	}
	h.logf("mode %s, %s relays, %s broker, seed %d", m.name, rm, bm, seed)
	if n := reapOrphans(); n > 0 {
		h.logf("reaped the leftovers of %d earlier runs whose harness was killed", n)
	}
	dir, err := os.MkdirTemp("", "warren-reliability-")
	if err != nil {
		h.logf("error: %v", err)
		return 1
	}
	h.dir = dir
	if err := claimDir(dir); err != nil {
		h.logf("error: %v", err)
		return 1
	}
	// The server processes run as other users and must reach their
	// directories inside this one.
	os.Chmod(dir, 0o711)
	res, err := h.runAll(ctx)
	h.shutdown()
	// Everything is stopped: a kept directory is not an orphan for the
	// next run to reap.
	os.Remove(filepath.Join(dir, pidFile))
	if res != nil {
		h.scanLogs(res)
	}
	if err != nil {
		h.removeServiceData()
		h.logf("error: %v", err)
		h.logf("logs kept in %s", filepath.Join(dir, "logs"))
		return 1
	}
	res.seed, res.total = seed, time.Since(h.started)
	res.flags = extraFlags()
	report := res.markdown()
	if out == "" {
		out = filepath.Join(dir, "RELIABILITY.md")
		keep = keep || !res.passed()
	}
	if err := os.WriteFile(out, []byte(report), 0o644); err != nil {
		h.logf("write report: %v", err)
		return 1
	}
	fmt.Println(res.summary())
	h.logf("report: %s", out)
	if res.passed() && !keep {
		os.RemoveAll(dir)
	} else {
		h.removeServiceData()
		h.logf("run directory kept: %s", dir)
	}
	if !res.passed() {
		return 1
	}
	return 0
}

// runAll starts everything, runs the workload and the faults, drains and
// checks. It leaves stopping to shutdown.
func (h *harness) runAll(ctx context.Context) (*result, error) {
	// The background measurements (catch-up, ready again) end with the
	// run: a catch-up still waiting then is reported as not caught up,
	// and shutdown, which waits for them, cannot hang on one.
	ctx, endMeasurements := context.WithCancel(ctx)
	defer endMeasurements()
	for _, d := range []string{"bin", "logs", "rabbitmq", "postgres", "redis"} {
		if err := os.MkdirAll(filepath.Join(h.dir, d), 0o755); err != nil {
			return nil, err
		}
	}
	if err := h.startServices(ctx); err != nil {
		return nil, err
	}
	if err := h.setup(ctx); err != nil {
		return nil, err
	}

	// The workload.
	wctx, stopWorkload := context.WithCancel(ctx)
	defer stopWorkload()
	var workers sync.WaitGroup
	for i := range h.mode.workers {
		workers.Go(func() {
			h.wl.runWorker(wctx, h.rng.Uint64()+uint64(i), h.mode.rate/float64(h.mode.workers), h.mode.rollbackPct)
		})
	}
	captureSeed := h.rng.Uint64()
	workers.Go(func() { h.wl.runCaptured(wctx, captureSeed, h.mode.captureRate, h.mode.rollbackPct) })
	pollCtx, stopPoll := context.WithCancel(ctx)
	defer stopPoll()
	var pollers sync.WaitGroup
	pollers.Go(func() { pollRuns(pollCtx, h.pool, h.tracker) })
	pollers.Go(func() { h.scrapeStats(pollCtx) })

	h.logf("warm-up %v", h.mode.warmup)
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(h.mode.warmup):
	}
	base := &faultRecord{kind: "baseline", end: time.Now()}
	h.measure(ctx, base)
	if !base.recovered {
		return nil, fmt.Errorf("no event reached both consumers within %v before any fault: the pipeline does not work", h.mode.recoveryTimeout)
	}
	if len(base.problems) > 0 {
		return nil, fmt.Errorf("before any fault: %s", strings.Join(base.problems, "; "))
	}
	h.logf("baseline: an event reaches both consumers in %v", base.recovery.Round(time.Millisecond))
	h.timings["baseline delivery"] = base.recovery

	// The faults.
	phaseEnd := time.Now().Add(h.mode.faultPhase)
	plan := schedule(h.rng, h.mode.counts)
	injected := map[faultKind]bool{}
	skipped := 0
	for i, kind := range plan {
		if ctx.Err() != nil {
			break
		}
		// After the phase, only kinds not yet injected run: every kind
		// the mode counts is covered at least once. The fault that brings
		// a cluster node back runs whenever its fault ran, and only then.
		if isUndo(kind) {
			if !h.pendingUndo(kind) {
				continue
			}
		} else if time.Now().After(phaseEnd) && injected[kind] {
			skipped++
			continue
		}
		injected[kind] = true
		gap := h.mode.gapMin + time.Duration(h.rng.Int64N(int64(h.mode.gapMax-h.mode.gapMin)+1))
		select {
		case <-ctx.Done():
		case <-time.After(gap):
		}
		f := h.inject(ctx, kind)
		h.faults = append(h.faults, f)
		h.measure(ctx, f)
		if h.verbose || f.err != "" || !f.recovered {
			h.logf("fault %d/%d %s %s: recovered=%v in %v%s", i+1, len(plan), kind, f.target, f.recovered,
				f.recovery.Round(time.Millisecond), map[bool]string{true: " ERROR " + f.err}[f.err != ""])
		}
		if !f.recovered && ctx.Err() == nil {
			h.logf("no recovery within %v after %s: stopping the fault phase", h.mode.recoveryTimeout, kind)
			break
		}
	}
	if skipped > 0 {
		h.logf("fault phase over: %d of %d faults skipped", skipped, len(plan))
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if err := h.restoreCluster(ctx); err != nil {
		return nil, err
	}
	stopWorkload()
	workers.Wait()
	if h.cdc() {
		if err := h.withRetry(ctx, func(ctx context.Context) (err error) {
			h.stopLSN, _, err = h.slotPosition(ctx)
			return err
		}); err != nil {
			return nil, fmt.Errorf("read the WAL position at the workload's end: %w", err)
		}
	}
	h.logf("workload stopped: %d committed, %d rolled back, %d failed, %d ambiguous transactions",
		h.wl.countOf(statusCommitted), h.wl.countOf(statusRolledBack), h.wl.countOf(statusFailed), h.wl.countOf(statusAmbiguous))

	drained := h.drain(ctx)
	h.logf("drain: %v (complete=%v); quiet period %v", h.timings["drain"].Round(time.Millisecond), drained, h.mode.quiet)
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(h.mode.quiet):
	}
	stopPoll()
	pollers.Wait()
	res, err := h.check(ctx)
	if err != nil {
		return nil, err
	}
	res.drained, res.replayed = drained, h.replayed
	for _, p := range h.replayProblems {
		res.fail("%s", p)
	}
	return res, nil
}

// startServices starts the private services and builds the binaries, at
// the same time.
func (h *harness) startServices(ctx context.Context) error {
	var wg sync.WaitGroup
	var buildErr, rabbitErr, pgErr, redisErr error
	wg.Go(func() {
		start := time.Now()
		buildErr = h.build(ctx)
		h.timings["build the binaries"] = time.Since(start)
	})
	wg.Go(func() { rabbitErr = h.startBroker(ctx) })
	wg.Go(func() { h.pg, pgErr = startPostgres(ctx, filepath.Join(h.dir, "postgres"), h.postgresSettings()) })
	wg.Go(func() { h.redis, redisErr = startRedis(ctx, filepath.Join(h.dir, "redis")) })
	wg.Wait()
	if err := errors.Join(buildErr, rabbitErr, pgErr, redisErr); err != nil {
		return err
	}
	h.timings["start PostgreSQL (initdb + start)"] = h.pg.Startup
	h.timings["start Redis"] = h.redis.Startup
	h.logf("private services: %s, PostgreSQL :%d (%v), Redis :%d (%v); binaries built in %v",
		h.brokerText(), h.pg.port, h.pg.Startup.Round(time.Millisecond),
		h.redis.port, h.redis.Startup.Round(time.Millisecond), h.timings["build the binaries"].Round(time.Millisecond))
	return nil
}

// build compiles the real binaries from this checkout.
func (h *harness) build(ctx context.Context) error {
	root, err := moduleRoot(ctx)
	if err != nil {
		return err
	}
	args := []string{"build", "-o", filepath.Join(h.dir, "bin") + "/"}
	if h.race {
		args = append(args, "-race")
	}
	args = append(args, "./cmd/warren", "./examples/webhook/cmd/webhook", "./examples/automation/cmd/automation")
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

// moduleRoot is the warren checkout's root directory: the binaries are built
// from there, and the long mode's report is written there.
func moduleRoot(ctx context.Context) (string, error) {
	root, err := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		return "", fmt.Errorf("find the module root (run from the checkout): %w", err)
	}
	return strings.TrimSpace(string(root)), nil
}

// setup creates the tables, starts the receiver and the processes, and
// installs the automation rule.
func (h *harness) setup(ctx context.Context) error {
	var err error
	if h.admin, err = pgx.Connect(ctx, h.pg.URL()); err != nil {
		return err
	}
	if h.pool, err = pgxpool.New(ctx, h.pg.URL()); err != nil {
		return err
	}
	if _, err := h.admin.Exec(ctx, ledgerSchema); err != nil {
		return err
	}
	a, err := app.New("", outboxTable)
	if err != nil {
		return err
	}
	h.wl = &workload{pool: h.pool, app: a, tracker: h.tracker, run: h.runID}

	h.recv = newReceiver([]byte(webhookSecret))
	h.recv.onAccept = h.tracker.webhookSeen
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	h.recvURL = "http://" + ln.Addr().String()
	srv := httpserver.New("", h.recv)
	srv.ConnContext = h.connContext
	go srv.Serve(ln) // closed with the process; it holds nothing to flush
	if h.endpoints, err = startHostileEndpoints(); err != nil {
		return err
	}

	bin := func(name string) string { return filepath.Join(h.dir, "bin", name) }
	common := append(cleanEnv(), "AMQP_URL="+h.amqpURL(), "DATABASE_URL="+h.pg.URL(), "REDIS_URL="+h.redis.URL(),
		"WARREN_EXCHANGE="+exchange, "WARREN_OUTBOX_TABLE="+outboxTable, "WEBHOOK_SECRET="+webhookSecret)
	add := func(kind, name, binary string, args []string, env ...string) error {
		port, err := freePort()
		if err != nil {
			return err
		}
		addr := "127.0.0.1:" + strconv.Itoa(port)
		if kind == "relay" {
			args = append(args, "--health-addr", addr)
		} else {
			env = append(env, "HEALTH_ADDR="+addr)
		}
		spec := procSpec{name: name, kind: kind, bin: binary, args: args, env: append(append([]string(nil), common...), env...), health: "http://" + addr}
		h.procs = append(h.procs, newProc(spec, filepath.Join(h.dir, "logs", name+".log")))
		return nil
	}
	for _, r := range []string{"a", "b"} {
		if err := add("webhook", "webhook-"+r, bin("webhook"), nil, h.consumerEnv("WARREN_QUEUE="+webhookQueue, "WEBHOOK_URL="+h.recvURL+"/hook,"+h.endpoints.webhookURLs())...); err != nil {
			return err
		}
		if err := add("automation", "automation-"+r, bin("automation"), nil, h.consumerEnv("WARREN_QUEUE="+autoQueue)...); err != nil {
			return err
		}
	}
	for _, r := range []string{"a", "b"} {
		if err := add("relay", "relay-"+r, bin("warren"), h.relayArgs("relay-"+r)); err != nil {
			return err
		}
	}
	// Consumers first: their queues must be bound before the relays
	// publish, or the first events would be unroutable.
	start := time.Now()
	for _, p := range h.procs {
		if p.spec.kind == "relay" {
			continue
		}
		go p.run(context.Background())
	}
	for _, p := range h.procs {
		if p.spec.kind != "relay" {
			if err := p.waitReady(ctx, time.Minute); err != nil {
				return err
			}
		}
	}
	h.timings["consumers ready (4 processes)"] = time.Since(start)
	if err := h.admin.QueryRow(ctx, `INSERT INTO automation_rules (name, when_state, set_priority) VALUES ($1, $2, $3) RETURNING id`,
		"done work is not urgent", ruleState, rulePriority).Scan(&h.ruleID); err != nil {
		return fmt.Errorf("install the automation rule: %w", err)
	}
	start = time.Now()
	for _, p := range h.procs {
		if p.spec.kind == "relay" {
			go p.run(context.Background())
		}
	}
	for _, p := range h.procs {
		if p.spec.kind == "relay" {
			if err := p.waitReady(ctx, time.Minute); err != nil {
				return err
			}
		}
	}
	h.timings["relays ready (2 processes)"] = time.Since(start)
	// After the relays: their --migrate creates the outbox the capture
	// writes to.
	if err := h.installCapture(ctx); err != nil {
		return err
	}
	h.logf("processes ready: %d consumers, 2 %s relays; receiver at %s", len(h.procs)-2, h.relays, h.recvURL)
	return nil
}

// sum adds durations up.
func sum(ds []time.Duration) (total time.Duration) {
	for _, d := range ds {
		total += d
	}
	return total
}

// consumerConfig is what the harness knows of a consumer's configuration:
// enough to name its queues.
func (h *harness) consumerConfig(name string) consumer.Config {
	return consumer.Config{Name: name, Exchange: exchange, RetryDelays: h.mode.retryDelays}
}

// consumerEnv is a consumer's own environment: the mode's retry tiers, and
// on a cluster, its queues (main, retry tiers, DLQ) are quorum queues.
func (h *harness) consumerEnv(env ...string) []string {
	env = append(env, "WARREN_RETRY_DELAYS="+strings.Join(tierNames(h.mode.retryDelays), ","))
	if h.clustered() {
		env = append(env, "WARREN_QUEUE_TYPE=quorum")
	}
	return env
}

// relayArgs are a supervised relay's arguments in the run's relay mode
// (add appends --health-addr: a CDC relay's /readyz answers 200 while it
// streams the slot or stands by for it). Its grace on SIGTERM is its
// publish timeout (relayStopGrace).
func (h *harness) relayArgs(name string) []string {
	args := []string{"relay", "run", "--migrate", "--name", name, "--publish-timeout", relayStopGrace.String()}
	if h.cdc() {
		// Every relay names the default slot (cdcSlot): one streams it,
		// the other stands by. Their BatchSize sizes the large
		// transaction and its bound on duplicates (largetx.go).
		return append(args, "--mode", "cdc", "--batch-size", strconv.Itoa(cdcBatchSize))
	}
	return append(append(args, "--lease", h.mode.relayLease.String()), h.holdBackArgs()...)
}

// withAdmin runs f on the admin connection, reconnecting it if needed.
func (h *harness) withAdmin(ctx context.Context, f func(ctx context.Context) error) error {
	for attempt := 0; ; attempt++ {
		if h.admin == nil || h.admin.IsClosed() {
			conn, err := pgx.Connect(ctx, h.pg.URL())
			if err != nil {
				if attempt >= 20 {
					return err
				}
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(250 * time.Millisecond):
				}
				continue
			}
			h.admin = conn
		}
		err := f(ctx)
		if err == nil || attempt >= 3 || !h.admin.IsClosed() {
			return err
		}
	}
}

// scrapeStats samples the consumers' health endpoints, so the stats of a
// process that is later killed are known up to its last sample.
func (h *harness) scrapeStats(ctx context.Context) {
	for {
		for _, p := range h.procs {
			if p.spec.kind != "relay" {
				p.ready(ctx)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

// shutdown stops the processes gracefully (recording whether each
// stopped cleanly), then the services.
func (h *harness) shutdown() {
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, p := range h.procs {
		wg.Go(func() {
			clean, detail := p.stop(45 * time.Second)
			mu.Lock()
			if !clean {
				h.exitCodes[p.spec.name] = detail
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	h.bg.Wait()
	if h.endpoints != nil {
		h.endpoints.close()
	}
	if h.admin != nil {
		h.admin.Close(context.Background())
	}
	if h.pool != nil {
		h.pool.Close()
	}
	for _, stop := range []func(){
		h.stopBroker,
		func() {
			if h.pg != nil {
				h.pg.Stop()
			}
		},
		func() {
			if h.redis != nil {
				h.redis.Stop()
			}
		},
	} {
		stop()
	}
}

// removeServiceData deletes the services' data, keeping logs.
func (h *harness) removeServiceData() {
	os.RemoveAll(filepath.Join(h.dir, "rabbitmq", "mnesia"))
	nodes, _ := filepath.Glob(filepath.Join(h.dir, "rabbitmq", "*", "mnesia")) // a cluster's
	for _, d := range nodes {
		os.RemoveAll(d)
	}
	os.RemoveAll(filepath.Join(h.dir, "postgres", "data"))
	os.RemoveAll(filepath.Join(h.dir, "bin"))
}
