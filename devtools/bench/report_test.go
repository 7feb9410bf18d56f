package main

import (
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

func TestMedianAndPercentile(t *testing.T) {
	for _, c := range []struct {
		xs   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{5, 1, 3}, 3}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := median(c.xs); got != c.want {
			t.Errorf("median(%v) = %v, want %v", c.xs, got, c.want)
		}
	}
	sorted := make([]float64, 100)
	for i := range sorted {
		sorted[i] = float64(i + 1) // 1..100
	}
	if p50, p99 := percentile(sorted, 0.5), percentile(sorted, 0.99); p50 != 51 || p99 != 100 {
		t.Errorf("p50, p99 of 1..100 = %v, %v; want 51, 100 (nearest rank)", p50, p99)
	}
	if percentile(nil, 0.5) != 0 {
		t.Error("percentile of nothing must be 0")
	}
}

// result builds a result from per-variant samples, one figures per round.
func resultOf(s scenario, samples ...[]figures) result {
	return result{scenario: s, size: "test", rounds: len(samples[0]), samples: samples}
}

func rates(xs ...float64) []figures {
	out := make([]figures, len(xs))
	for i, x := range xs {
		out[i] = figures{x}
	}
	return out
}

// The ratio's denominator is the best baseline (the highest rate, or the
// lowest latency), and a target is met or missed on medians.
func TestVerdicts(t *testing.T) {
	throughputScenario := scenario{
		name:    "drain",
		metrics: []metric{{name: "msg/s", target: target{ratio: 1}}},
		variants: []variant{
			{name: "raw slow", baseline: true}, {name: "raw fast", baseline: true},
			{name: "warren", why: "because"},
		},
	}
	r := resultOf(throughputScenario, rates(50, 60, 70), rates(90, 100, 200), rates(95, 99, 1000))
	if best := r.best(0); best != 100 {
		t.Fatalf("best baseline = %v, want the fast raw's median 100", best)
	}
	v := r.verdicts()
	if len(v) != 1 || v[0].met || v[0].ratio != 0.99 || v[0].why != "because" || !v[0].bestRoundMet {
		t.Fatalf("verdicts = %+v; want warren missed at ratio 0.99 (medians, not means), its best round (1000) meeting it", v)
	}

	// -variant can leave out every baseline; a ratio target is then not
	// judged at all rather than judged met.
	alone := throughputScenario
	alone.variants = alone.variants[2:]
	if v := resultOf(alone, rates(95, 99, 1000)).verdicts(); len(v) != 0 {
		t.Fatalf("verdicts without a baseline = %+v; want none", v)
	}

	// A variant with a throughput target of its own is judged on it, and
	// the others on the scenario's.
	own := scenario{
		name:    "dedup",
		metrics: []metric{{name: "msg/s", target: target{ratio: 1}}},
		variants: []variant{
			{name: "raw", baseline: true},
			{name: "warren"},
			{name: "warren transactional", throughputTarget: &target{ratio: 0.75}},
		},
	}
	v = resultOf(own, rates(100), rates(80), rates(80)).verdicts()
	if len(v) != 2 || v[0].met || !v[1].met || v[1].targetText() != "ratio ≥ 0.75" {
		t.Fatalf("verdicts = %+v; want warren missed at 0.80 of raw against 1.00, the transactional variant met against its own 0.75", v)
	}
	if bars := ratioBars([]result{resultOf(own, rates(100), rates(80), rates(80))}); len(bars) != 2 || bars[0].target != 1 || bars[1].target != 0.75 {
		t.Fatalf("bars = %+v; want each warren variant's own target", bars)
	}

	latency := scenario{
		name: "latency",
		metrics: []metric{
			{name: "p50 ms", lowerBetter: true, target: target{bound: 5}},
			{name: "p99 ms", lowerBetter: true, target: target{bound: 50}},
		},
		variants: []variant{{name: "poller", baseline: true}, {name: "relay"}},
	}
	r = resultOf(latency,
		[]figures{{150, 270}, {140, 260}, {160, 280}},
		[]figures{{2, 40}, {3, 60}, {1, 70}})
	got := map[string]bool{}
	for _, v := range r.verdicts() {
		got[v.metric.name] = v.met
	}
	if !got["p50 ms"] || got["p99 ms"] {
		t.Fatalf("latency verdicts %v; want p50 (median 2) met and p99 (median 60) missed", got)
	}
	if best := r.best(0); best != 150 {
		t.Fatalf("best latency baseline = %v, want the lowest median, 150", best)
	}
}

// The latency scenario's committed rate is held to a floor derived from
// the rate it was asked for: an absolute bound on a metric where higher is
// better. A reference (producers without a relay) is shown, with its
// unmeasured latencies as "–", but neither judged nor a denominator.
func TestCommittedRateFloorAndReference(t *testing.T) {
	s := latencyScenario(1000)
	if m := s.metrics[2]; m.lowerBetter || m.target.bound != 970 {
		t.Fatalf("committed metric %+v; want at least 970 (0.97 × 1000)", m)
	}
	s.variants = []variant{
		{name: "poller", baseline: true},
		{name: "alone", reference: true},
		{name: "relay"},
	}
	r := resultOf(s,
		[]figures{{150, 270, 1000}, {150, 270, 1000}, {150, 270, 1000}},
		[]figures{{math.NaN(), math.NaN(), 2000}, {math.NaN(), math.NaN(), 2000}, {math.NaN(), math.NaN(), 2000}},
		[]figures{{2, 40, 980}, {3, 30, 960}, {2, 35, 950}})
	got := map[string]verdict{}
	for _, v := range r.verdicts() {
		if v.variant != "relay" {
			t.Fatalf("verdict for %q: only warren's variants are judged", v.variant)
		}
		got[v.metric.name] = v
	}
	if c := got["committed events/s"]; len(got) != 3 || c.met || !c.bestRoundMet || c.targetText() != "committed events/s ≥ 970" {
		t.Fatalf("verdicts %+v; want committed missed at a median of 960 < 970, its best round (980) meeting it", got)
	}
	if r.best(2) != 1000 {
		t.Fatalf("best committed baseline = %v; want the poller's 1000, not the reference's 2000", r.best(2))
	}
	r.samples[2][1][2] = 975 // the median round now keeps the schedule
	for _, v := range r.verdicts() {
		if !v.met {
			t.Fatalf("%s missed: %+v", v.metric.name, v)
		}
	}
	out := renderReport([]result{r}, runInfo{rounds: 3})
	if want := "| alone | – | – | – | – | – | – | 2000 | 2000 – 2000 | 2.00 |"; !strings.Contains(out, want) {
		t.Fatalf("report lacks %q:\n%s", want, out)
	}
}

// A peer (another framework) is neither judged nor a baseline: it is the
// denominator of the second ratio, and a target with a peer ratio is met
// only when both ratios meet theirs.
func TestPeerVerdicts(t *testing.T) {
	s := scenario{
		name:    "drain",
		metrics: []metric{{name: "msg/s", target: target{ratio: 1, peerRatio: 1.4}}},
		variants: []variant{
			{name: "raw", baseline: true},
			{name: "peer slow", peer: true}, {name: "peer fast", peer: true},
			{name: "warren"},
		},
	}
	check := func(warren []figures, wantMet bool, wantPeerRatio float64) {
		t.Helper()
		r := resultOf(s, rates(100, 100, 100), rates(50, 60, 70), rates(70, 80, 500), warren)
		if best, peer := r.best(0), r.bestPeer(0); best != 100 || peer != 80 {
			t.Fatalf("best baseline, best peer = %v, %v; want 100 (the raw) and 80 (the fast peer's median, not its 500 round)", best, peer)
		}
		v := r.verdicts()
		if len(v) != 1 || v[0].variant != "warren" {
			t.Fatalf("verdicts = %+v; want warren's alone (peers are not judged)", v)
		}
		if v[0].met != wantMet || v[0].peerRatio != wantPeerRatio {
			t.Fatalf("verdict = %+v; want met %v at peer ratio %v", v[0], wantMet, wantPeerRatio)
		}
	}
	check(rates(120, 120, 120), true, 1.5)  // 1.2× raw, 1.5× the best peer
	check(rates(104, 104, 104), false, 1.3) // ahead of raw, short of 1.4× the peer
	check(rates(96, 96, 96), false, 1.2)    // behind raw

	// -variant leaving out the peers leaves the raw ratio to judge.
	noPeer := s
	noPeer.variants = []variant{s.variants[0], s.variants[3]}
	v := resultOf(noPeer, rates(100), rates(104)).verdicts()
	if len(v) != 1 || !v[0].met || v[0].peerRatio != 0 {
		t.Fatalf("verdicts without a peer = %+v; want met on the raw ratio alone", v)
	}
}

// The report names the command, the machine's load, each variant's
// median, spread and ratio, and the reason of every missed target.
func TestRenderReport(t *testing.T) {
	s := scenario{
		name:    "drain",
		about:   "Drains things.",
		metrics: []metric{{name: "msg/s", target: target{ratio: 1}}},
		variants: []variant{
			{name: "raw", baseline: true},
			{name: "warren", why: "it does more"},
		},
	}
	memory := scenario{
		name:     "memory",
		metrics:  []metric{{name: "peak RSS MB", lowerBetter: true, target: target{bound: 50}}},
		variants: []variant{{name: "warren: consumer"}},
	}
	run := runInfo{command: "go run . -rounds 3", rounds: 3, started: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC),
		finished: time.Date(2026, 11, 29, 12, 7, 0, 0, time.UTC), loadBefore: "1.00, 2.00, 3.00", loadAfter: "4.00, 5.00, 6.00"}
	peered := scenario{
		name:    "relay",
		metrics: []metric{{name: "msg/s", target: target{ratio: 1.1, peerRatio: 7}}},
		variants: []variant{
			{name: "raw", baseline: true},
			{name: "watermill: Forwarder", peer: true},
			{name: "warren", why: "it confirms"},
		},
	}
	out := renderReport([]result{
		resultOf(s, rates(100, 110, 120), rates(80, 90, 100)),
		resultOf(memory, []figures{{23.4}}),
		resultOf(peered, rates(5000), rates(800), rates(5600)),
	}, run)
	for _, want := range []string{
		"`cd devtools/bench && go run . -rounds 3`",
		"1.00, 2.00, 3.00 before, 4.00, 5.00, 6.00 after",
		"| warren | 90.0 | 80.0 – 100 | 0.82 |",
		"bytes of JSON |",
		"[`PROFILES.md`](PROFILES.md)",
		"| drain | warren | 90.0 msg/s (ratio 0.82) | ratio ≥ 1.00 | **missed** |",
		"- drain / warren (msg/s): it does more", // no round of warren's reached the target
		"| memory | warren: consumer | 23.4 peak RSS MB | peak RSS MB ≤ 50 | met |",
		"| variant | peak RSS MB median | spread |\n",               // no ratio column without a baseline
		"| variant | msg/s median | spread | ratio to best raw |\n", // no peer column without a peer
		"| variant | msg/s median | spread | ratio to best raw | ratio to best peer |\n",
		"| watermill: Forwarder | 800 | 800 – 800 | 0.16 | 1.00 |",
		"| warren | 5600 | 5600 – 5600 | 1.12 | 7.00 |",
		"| relay | warren | 5600.0 msg/s (ratio 1.12, to best peer 7.00) | ratio ≥ 1.10 and ratio to best peer ≥ 7.00 | met |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
}

// The chart plots the throughput ratios of warren's variants only.
func TestChart(t *testing.T) {
	s := scenario{
		name:     "drain",
		metrics:  []metric{{name: "msg/s", target: target{ratio: 1}}},
		variants: []variant{{name: "raw", baseline: true}, {name: "warren"}},
	}
	latency := scenario{name: "latency", metrics: []metric{{name: "p50 ms", lowerBetter: true}},
		variants: []variant{{name: "poller", baseline: true}, {name: "relay"}}}
	peered := scenario{
		name:     "relay",
		metrics:  []metric{{name: "msg/s", target: target{ratio: 1.1, peerRatio: 7}}},
		variants: []variant{{name: "raw", baseline: true}, {name: "watermill", peer: true}, {name: "warren"}},
	}
	results := []result{resultOf(s, rates(100), rates(120)), resultOf(latency, rates(150), rates(2)),
		resultOf(peered, rates(100), rates(20), rates(110))}
	bars := ratioBars(results)
	want := []bar{
		{label: "drain: warren", ratio: 1.2, target: 1},
		{label: "relay: warren", ratio: 1.1, target: 1.1},
		{label: "relay: warren ÷ best peer", ratio: 5.5, target: 7},
	}
	if !slices.Equal(bars, want) {
		t.Fatalf("bars = %+v; want %+v: warren's throughput ratios alone, to the best raw and to the best peer", bars, want)
	}
	path := filepath.Join(t.TempDir(), chartFile)
	if err := writeChart(path, results); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil || !strings.HasPrefix(string(data), "\x89PNG") {
		t.Fatalf("chart is not a PNG (%d bytes, %v)", len(data), err)
	}
}

func TestEventIndex(t *testing.T) {
	for _, c := range []struct {
		id   string
		want int
		ok   bool
	}{
		{sampleEvent(0).ID, 0, true},
		{sampleEvent(123456).ID, 123456, true},
		{"short", 0, false},
		{"6f1c2a9e-0000-4000-8000-notanumber!", 0, false},
	} {
		i, ok := eventIndex(amqp.Delivery{MessageId: c.id})
		if i != c.want || ok != c.ok {
			t.Errorf("eventIndex(%q) = %d, %v; want %d, %v", c.id, i, ok, c.want, c.ok)
		}
	}
}
