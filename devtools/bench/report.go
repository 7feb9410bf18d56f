package main

import (
	"cmp"
	"fmt"
	"math"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"time"
)

type result struct {
	scenario scenario
	size     string      // one measurement's workload, as the progress output said
	rounds   int         // how many rounds it ran
	samples  [][]figures // per variant, one measurement per round
}

func (r result) hasBaseline() bool {
	return slices.ContainsFunc(r.scenario.variants, func(v variant) bool { return v.baseline })
}

// runInfo is what the report says about the run as a whole.
type runInfo struct {
	command               string
	rounds                int
	started, finished     time.Time
	loadBefore, loadAfter string
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n == 0 {
		return 0
	}
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// column is one metric's values over the rounds of one variant.
func (r result) column(variant, metric int) []float64 {
	xs := make([]float64, len(r.samples[variant]))
	for i, f := range r.samples[variant] {
		xs[i] = f[metric]
	}
	return xs
}

func (r result) hasPeer() bool {
	return slices.ContainsFunc(r.scenario.variants, func(v variant) bool { return v.peer })
}

// best is the median of the best baseline on a metric, or 0 when the
// scenario has no baseline.
func (r result) best(metric int) float64 {
	return r.bestOf(metric, func(v variant) bool { return v.baseline })
}

// bestPeer is the median of the best peer variant (another framework) on
// a metric, or 0 when the scenario has none.
func (r result) bestPeer(metric int) float64 {
	return r.bestOf(metric, func(v variant) bool { return v.peer })
}

// bestOf is the best median on a metric among the variants that match.
func (r result) bestOf(metric int, match func(variant) bool) float64 {
	m := r.scenario.metricList()[metric]
	best := 0.0
	for i, v := range r.scenario.variants {
		if !match(v) {
			continue
		}
		med := median(r.column(i, metric))
		if best == 0 || (m.lowerBetter && med < best) || (!m.lowerBetter && med > best) {
			best = med
		}
	}
	return best
}

// verdict is one warren variant's standing against one metric's target.
type verdict struct {
	scenario, variant string
	metric            metric
	value, ratio      float64 // ratio is 0 without a baseline
	peerRatio         float64 // to the best peer; 0 without a peer
	met               bool
	bestRoundMet      bool // the variant's best round alone would have met the target
	why               string
}

func (v verdict) targetText() string {
	var parts []string
	cmp := "≥"
	if v.metric.lowerBetter {
		cmp = "≤"
	}
	if v.metric.target.ratio > 0 {
		parts = append(parts, fmt.Sprintf("ratio %s %.2f", cmp, v.metric.target.ratio))
	}
	if v.metric.target.peerRatio > 0 {
		parts = append(parts, fmt.Sprintf("ratio to best peer %s %.2f", cmp, v.metric.target.peerRatio))
	}
	if v.metric.target.bound > 0 {
		parts = append(parts, fmt.Sprintf("%s %s %g", v.metric.name, cmp, v.metric.target.bound))
	}
	return strings.Join(parts, " and ")
}

func (v verdict) outcome() string {
	if v.met {
		return "met"
	}
	return "**missed**"
}

// judged says whether v is one of warren's variants, held to the
// scenario's targets: not a baseline, a peer or a reference.
func (v variant) judged() bool { return !v.baseline && !v.peer && !v.reference }

// verdicts checks every warren variant against its scenario's targets, on
// medians.
func (r result) verdicts() []verdict {
	var out []verdict
	for vi, v := range r.scenario.variants {
		if !v.judged() {
			continue
		}
		for mi := range r.scenario.metricList() {
			m := r.scenario.metricFor(v, mi)
			if m.target == (target{}) {
				continue
			}
			best, bestPeer := r.best(mi), r.bestPeer(mi)
			if (best == 0 || m.target.ratio == 0) && (bestPeer == 0 || m.target.peerRatio == 0) && m.target.bound == 0 {
				// Only ratios to judge, and -variant left out every
				// baseline and peer: nothing to judge them against.
				continue
			}
			xs := r.column(vi, mi)
			val := median(xs)
			vd := verdict{scenario: r.scenario.name, variant: v.name, metric: m, value: val, why: v.why}
			if best > 0 {
				vd.ratio = val / best
			}
			if bestPeer > 0 {
				vd.peerRatio = val / bestPeer
			}
			vd.met = meets(m, val, best, bestPeer)
			bestRound := slices.Max(xs)
			if m.lowerBetter {
				bestRound = slices.Min(xs)
			}
			vd.bestRoundMet = meets(m, bestRound, best, bestPeer)
			out = append(out, vd)
		}
	}
	return out
}

// meets reports whether value meets m's target, best being the best
// baseline's median and bestPeer the best peer's (each 0 without one: that
// part of the target is then not judged).
func meets(m metric, value, best, bestPeer float64) bool {
	met := true
	within := func(ratio, t float64) bool {
		return (m.lowerBetter && ratio <= t) || (!m.lowerBetter && ratio >= t)
	}
	if t := m.target.ratio; t > 0 && best > 0 {
		met = met && within(value/best, t)
	}
	if t := m.target.peerRatio; t > 0 && bestPeer > 0 {
		met = met && within(value/bestPeer, t)
	}
	if b := m.target.bound; b > 0 {
		met = met && ((m.lowerBetter && value <= b) || (!m.lowerBetter && value >= b))
	}
	return met
}

// renderReport writes the markdown report: the machine and the run, the
// targets and whether warren met them, then per scenario each variant's
// median and spread per metric and its ratio to the best baseline.
func renderReport(results []result, run runInfo) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# warren benchmark results\n\n")
	fmt.Fprintf(&b, "Generated by `cd devtools/bench && %s` on %s in %s.\n\n", strings.TrimSpace(run.command),
		run.started.UTC().Format("2006-01-02 15:04 MST"), run.finished.Sub(run.started).Round(time.Second))
	fmt.Fprintf(&b, "| machine | |\n|---|---|\n")
	fmt.Fprintf(&b, "| CPU | %d cores, %s |\n", runtime.NumCPU(), cpuModel())
	fmt.Fprintf(&b, "| load average (1, 5, 15 min) | %s before, %s after; the machine is shared with other engineers' test runs |\n", run.loadBefore, run.loadAfter)
	fmt.Fprintf(&b, "| Go | %s %s/%s |\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
	fmt.Fprintf(&b, "| RabbitMQ | %s |\n", commandLine("rabbitmqctl", "-q", "version"))
	fmt.Fprintf(&b, "| PostgreSQL | %s |\n", commandLine("psql", "--version"))
	fmt.Fprintf(&b, "| Redis | %s |\n", commandLine("redis-server", "--version"))
	fmt.Fprintf(&b, "| client libraries | %s |\n", moduleVersions())
	fmt.Fprintf(&b, "| message | a Plane `workitem.updated` envelope, %d bytes of JSON |\n\n", sampleBodySize())
	fmt.Fprintf(&b, "Every figure is the median of the rounds (%d unless a scenario says otherwise); the spread is the lowest and highest round. ", run.rounds)
	fmt.Fprintf(&b, "Variants alternate within each round, and a ratio divides a variant's median by the median of the best raw baseline ")
	fmt.Fprintf(&b, "of the same scenario in the same run (the highest rate, or the lowest latency), so it holds up better than the absolute ")
	fmt.Fprintf(&b, "numbers on a shared machine. Where a scenario has peer variants (Watermill: what a user would pick instead of warren), ")
	fmt.Fprintf(&b, "a second ratio divides by the best peer's median the same way. The chart [`%s`](%s) plots the throughput ratios.\n", chartFile, chartFile)
	// PROFILES.md is written by hand from go test's benchmarks, next to
	// the committed report.
	fmt.Fprintf(&b, "\nWhere the time goes, per message (allocations beside the raw loops', CPU profiles, what they led to): [`PROFILES.md`](PROFILES.md).\n")

	var all []verdict
	for _, r := range results {
		all = append(all, r.verdicts()...)
	}
	if len(all) > 0 {
		fmt.Fprintf(&b, "\n## Targets\n\n| scenario | warren variant | figure | target | result |\n|---|---|---:|---|---|\n")
		for _, v := range all {
			fig := fmt.Sprintf("%.1f %s", v.value, v.metric.name)
			switch {
			case v.ratio > 0 && v.peerRatio > 0:
				fig += fmt.Sprintf(" (ratio %.2f, to best peer %.2f)", v.ratio, v.peerRatio)
			case v.ratio > 0:
				fig += fmt.Sprintf(" (ratio %.2f)", v.ratio)
			case v.peerRatio > 0:
				fig += fmt.Sprintf(" (ratio to best peer %.2f)", v.peerRatio)
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", v.scenario, v.variant, fig, v.targetText(), v.outcome())
		}
		var missed []verdict
		for _, v := range all {
			if !v.met {
				missed = append(missed, v)
			}
		}
		if len(missed) > 0 {
			fmt.Fprintf(&b, "\nWhy the missed targets were missed:\n\n")
			for _, v := range missed {
				why := v.why
				if why == "" {
					why = "no explanation recorded; see the scenario below"
				}
				if v.bestRoundMet {
					why = "its best round met the target, so the miss is within this run's spread between rounds. Otherwise: " + why
				}
				fmt.Fprintf(&b, "- %s / %s (%s): %s\n", v.scenario, v.variant, v.metric.name, why)
			}
		}
	}

	for _, r := range results {
		if r.scenario.growth != nil || r.scenario.cluster != nil {
			continue // in "How cost grows" and the cluster's table, below
		}
		ms := r.scenario.metricList()
		fmt.Fprintf(&b, "\n## %s\n\n%s\n\nOne measurement: %s. Rounds: %d.\n\n", r.scenario.name, r.scenario.about, r.size, r.rounds)
		header, rule := "| variant |", "|---|"
		for _, m := range ms {
			header += fmt.Sprintf(" %s median | spread |", m.name)
			rule += "---:|---:|"
			if r.hasBaseline() {
				ratio := cmp.Or(r.scenario.ratioTo, "ratio to best raw")
				if m.lowerBetter {
					ratio += " (lower is better)"
				}
				header += " " + ratio + " |"
				rule += "---:|"
			}
			if r.hasPeer() {
				header += " ratio to best peer |"
				rule += "---:|"
			}
		}
		fmt.Fprintf(&b, "%s\n%s\n", header, rule)
		for i, v := range r.scenario.variants {
			fmt.Fprintf(&b, "| %s |", v.name)
			for mi := range ms {
				xs := r.column(i, mi)
				if math.IsNaN(median(xs)) {
					fmt.Fprintf(&b, " – | – |")
				} else {
					fmt.Fprintf(&b, " %s | %s – %s |", num(median(xs)), num(slices.Min(xs)), num(slices.Max(xs)))
				}
				if r.hasBaseline() {
					fmt.Fprintf(&b, " %s |", ratioText(median(xs), r.best(mi)))
				}
				if r.hasPeer() {
					fmt.Fprintf(&b, " %s |", ratioText(median(xs), r.bestPeer(mi)))
				}
			}
			fmt.Fprintln(&b)
		}
	}
	renderGrowth(&b, results)
	renderCluster(&b, results)
	return b.String()
}

// ratioText is x / best with two decimals, or "–" where x was not
// measured (NaN: a reference variant's latency).
func ratioText(x, best float64) string {
	if math.IsNaN(x) {
		return "–"
	}
	return fmt.Sprintf("%.2f", x/best)
}

// num prints large figures (rates) whole and small ones (milliseconds,
// megabytes) with one decimal.
func num(x float64) string {
	if x >= 100 || x <= -100 {
		return fmt.Sprintf("%.0f", x)
	}
	return fmt.Sprintf("%.1f", x)
}

// sampleBodySize is the size of the events every scenario sends.
func sampleBodySize() int {
	body, err := sampleEvent(0).MarshalJSON()
	if err != nil {
		return 0
	}
	return len(body)
}

func cpuModel() string {
	data, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	for _, line := range strings.Split(string(data), "\n") {
		if name, ok := strings.CutPrefix(line, "model name"); ok {
			return strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(name), ":"))
		}
	}
	return "unknown"
}

// moduleVersions lists the client libraries every side is built with, and
// the peers' framework.
func moduleVersions() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	var out []string
	for _, d := range info.Deps {
		switch d.Path {
		case "github.com/rabbitmq/amqp091-go", "github.com/jackc/pgx/v5", "github.com/redis/go-redis/v9",
			"github.com/ThreeDotsLabs/watermill", "github.com/ThreeDotsLabs/watermill-amqp/v3", "github.com/ThreeDotsLabs/watermill-sql/v4":
			out = append(out, d.Path+" "+d.Version)
		}
	}
	return strings.Join(out, ", ")
}

func commandLine(name string, args ...string) string {
	out, err := exec.Command(name, args...).Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}
