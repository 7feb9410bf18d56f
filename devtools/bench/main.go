package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// variant is one way of doing a scenario's work. run processes the
// workload it was given and returns one figure per metric of its
// scenario, in the scenario's order.
type variant struct {
	name     string
	baseline bool // a raw-client variant; the best baseline is the ratio's denominator
	// peer marks a variant of another framework a user would pick instead
	// of warren (Watermill); the best peer is the second ratio's
	// denominator, and a target's peer ratio is judged against it.
	peer bool
	run  func(ctx context.Context, env *env) (figures, error)
	// throughputTarget, when set, is this variant's target on a throughput
	// scenario's one metric in place of the scenario's: a variant that
	// buys a guarantee the others lack is held to a bar of its own.
	throughputTarget *target
	// reference marks a variant shown for comparison that is neither
	// judged nor a ratio's denominator (the producers without a relay).
	reference bool
	// why explains, in the report, a miss of the scenario's target by this
	// variant: what it pays for that the baseline does not.
	why string
}

// figures are one measurement of a variant, one value per metric.
type figures []float64

// rate is the figure of a throughput measurement: n messages in elapsed.
func rate(n int, elapsed time.Duration) figures {
	return figures{float64(n) / elapsed.Seconds()}
}

// metric is what one figure of a scenario measures.
type metric struct {
	name        string // the table's column: "msg/s", "p99 ms"
	lowerBetter bool   // latencies and memory: the best baseline is the lowest
	target      target
}

// target is what warren's variants should reach on a metric: a ratio to
// the best baseline, an absolute bound, or both (zero means none).
type target struct {
	ratio     float64 // at least this much of the best baseline (at most, when lowerBetter)
	peerRatio float64 // at least this much of the best peer (at most, when lowerBetter)
	bound     float64 // at most this much (at least, when !lowerBetter)
}

// throughput is the metric of the scenarios that drain a backlog.
var throughput = metric{name: "msg/s"}

type scenario struct {
	name    string
	about   string
	metrics []metric // default: throughput with no target
	// size describes one measurement's workload in the progress output.
	size func(e *env) string
	// rounds, when positive, caps -rounds for a scenario whose
	// measurements are long and steady (memory).
	rounds   int
	variants []variant
	// growth places the scenario on a growth chart (growth.go): a point
	// of one dimension, reported in "How cost grows" instead of a section
	// of its own.
	growth *growthPoint
	// cluster marks a scenario of the single node against the cluster
	// (cluster.go), reported in a table of its own instead of a section.
	cluster *clusterPoint
	// ratioTo names the ratio column when the scenario's baseline is not
	// a raw client but a point of its own (the sizing scenarios' one
	// queue, one replica, one relay): "÷ 1 queue". Such ratios stay out
	// of the ratio chart.
	ratioTo string
	// done, when set, removes what the scenario's variants share between
	// rounds (growth's backlog tables) once its last round has run.
	done func()
}

// roundsFor is how many rounds s runs when -rounds asks for n.
func (s *scenario) roundsFor(n int) int {
	if s.rounds > 0 {
		return min(s.rounds, n)
	}
	return n
}

// metricFor is metric mi of s as variant v is judged on it: with v's own
// target where it has one.
func (s *scenario) metricFor(v variant, mi int) metric {
	m := s.metricList()[mi]
	if v.throughputTarget != nil && len(s.metrics) <= 1 {
		m.target = *v.throughputTarget
	}
	return m
}

func (s *scenario) metricList() []metric {
	if len(s.metrics) == 0 {
		return []metric{throughput}
	}
	return s.metrics
}

type env struct {
	amqpURL     string
	databaseURL string
	redisURL    string
	messages    int           // backlog size of the throughput scenarios
	rssMessages int           // messages of the memory scenario
	latencyRun  time.Duration // how long the latency and cdc producers scenarios produce
	// quorum makes every queue a measurement declares a quorum queue
	// (cluster.go): the raw variants' with x-queue-type, warren's with
	// consumer.Config.QueueType.
	quorum bool

	// Set by growth variants on their own copy of the env (growth.go):
	payloadData []byte          // every event's payload.data, when set (env.event)
	pgTracer    pgx.QueryTracer // traces the statements of the pools pgPool opens
}

func main() {
	if len(os.Args) > 2 && os.Args[1] == childFlag {
		// A subprocess of the memory scenario: see memory.go.
		if err := runChild(os.Args[2], os.Args[3:]); err != nil {
			fatal(err)
		}
		return
	}
	rounds := flag.Int("rounds", 5, "rounds per scenario; variants alternate within each round")
	messages := flag.Int("messages", 20000, "backlog size per throughput measurement")
	rssMessages := flag.Int("rss-messages", 1000000, "messages the memory scenario's consumer and relay each process")
	latencyRun := flag.Duration("latency-duration", 10*time.Second, "how long each latency and cdc producers measurement produces events")
	latencyRates := flag.String("latency-rate", "1000,3000", "events per second the latency scenario commits: a comma-separated list, one scenario per rate")
	filter := flag.String("run", "", "regexp selecting scenarios by name")
	variantFilter := flag.String("variant", "", "regexp selecting variants by name (for profiling one side)")
	out := flag.String("out", "", "write the markdown report here, and the ratio chart next to it as ratios.png (default: stdout only)")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the whole run here")
	flag.Parse()
	rates, err := parseRates(*latencyRates)
	if *rounds < 1 || *messages < 1 || *rssMessages < 1 || *latencyRun <= 0 || err != nil {
		fmt.Fprintln(os.Stderr, "bench: -rounds, -messages, -rss-messages, -latency-duration and each of -latency-rate must be positive")
		os.Exit(2)
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fatal(err)
		}
		defer pprof.StopCPUProfile()
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	e := servicesEnv()
	e.messages, e.rssMessages, e.latencyRun = *messages, *rssMessages, *latencyRun
	re, err := regexp.Compile(*filter)
	if err != nil {
		fatal(err)
	}
	vre, err := regexp.Compile(*variantFilter)
	if err != nil {
		fatal(err)
	}

	run := runInfo{command: "go run . " + strings.Join(os.Args[1:], " "), rounds: *rounds, started: time.Now(), loadBefore: loadAverage()}
	var results []result
	for _, s := range scenarios(rates) {
		if !re.MatchString(s.name) {
			continue
		}
		s.variants = slices.DeleteFunc(s.variants, func(v variant) bool { return !vre.MatchString(v.name) })
		size := fmt.Sprintf("%d messages each", e.messages)
		if s.size != nil {
			size = s.size(e)
		}
		n := s.roundsFor(*rounds)
		fmt.Fprintf(os.Stderr, "== %s (%d rounds × %d variants, %s)\n", s.name, n, len(s.variants), size)
		r := result{scenario: s, size: size, rounds: n, samples: make([][]figures, len(s.variants))}
		for round := range n {
			// Alternate the order each round so neither side always runs
			// on a warmer (or more fragmented) broker.
			order := make([]int, len(s.variants))
			for i := range order {
				order[i] = i
			}
			if round%2 == 1 {
				slices.Reverse(order)
			}
			for _, i := range order {
				v := s.variants[i]
				// The start time lets a slow round be matched with what
				// else the machine did then (checkpoints, other processes).
				started := time.Now()
				f, err := v.run(ctx, e)
				if err == nil && len(f) != len(s.metricList()) {
					err = fmt.Errorf("returned %d figures for %d metrics", len(f), len(s.metricList()))
				}
				if err != nil {
					pprof.StopCPUProfile()
					fatal(fmt.Errorf("%s / %s: %w", s.name, v.name, err))
				}
				r.samples[i] = append(r.samples[i], f)
				fmt.Fprintf(os.Stderr, "   %s round %d  %-52s %s\n", started.UTC().Format("15:04:05"), round+1, v.name, formatFigures(s.metricList(), f))
			}
		}
		if s.done != nil {
			s.done()
		}
		results = append(results, r)
	}
	stopCluster()
	run.finished, run.loadAfter = time.Now(), loadAverage()
	report := renderReport(results, run)
	fmt.Print(report)
	if *out != "" {
		chartPath := filepath.Join(filepath.Dir(*out), chartFile)
		if err := writeChart(chartPath, results); err != nil {
			fatal(err)
		}
		if err := writeGrowthCharts(filepath.Dir(*out), results); err != nil {
			fatal(err)
		}
		if err := os.WriteFile(*out, []byte(report), 0o644); err != nil {
			fatal(err)
		}
		fmt.Fprintf(os.Stderr, "wrote %s and %s\n", *out, chartPath)
	}
}

func scenarios(latencyRates []int) []scenario {
	out := []scenario{consumeScenario(), metricsScenario(), redisDedupScenario(), postgresDedupScenario(), relayScenario()}
	out = append(out, contractsConsumeScenario(), contractsPublishScenario())
	out = append(out, latencyScenarios(latencyRates)...)
	out = append(out, cdcScenarios()...)
	out = append(out, memoryScenario(), captureScenario())
	out = append(out, growthScenarios()...)
	out = append(out, clusterScenarios()...)
	return append(out, sizingScenarios()...)
}

// parseRates reads -latency-rate: positive integers separated by commas.
func parseRates(list string) ([]int, error) {
	var rates []int
	for _, f := range strings.Split(list, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("rate %q is not a positive integer", f)
		}
		rates = append(rates, n)
	}
	return rates, nil
}

func formatFigures(ms []metric, f figures) string {
	parts := make([]string, len(f))
	for i, v := range f {
		parts[i] = fmt.Sprintf("%9.1f %s", v, ms[i].name)
	}
	return strings.Join(parts, "  ")
}

// loadAverage is the 1-, 5- and 15-minute load average, as uptime shows
// it: the machine is shared, so the report records how busy it was.
func loadAverage() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	fields := strings.Fields(string(data))
	if len(fields) < 3 {
		return "unknown"
	}
	return strings.Join(fields[:3], ", ")
}

// servicesEnv is an env with the services' addresses, from AMQP_URL,
// DATABASE_URL and REDIS_URL or the local defaults the tests use.
func servicesEnv() *env {
	return &env{
		amqpURL:     envOr("AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/"),
		databaseURL: envOr("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"),
		redisURL:    envOr("REDIS_URL", "redis://127.0.0.1:6379/0"),
	}
}

func envOr(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}

func fatal(err error) {
	stopCluster()
	fmt.Fprintln(os.Stderr, "bench:", err)
	os.Exit(1)
}
