package main

import (
	"context"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// clusterResult is a cluster scenario of work whose four variants
// measured the rates given, one slice per variant place.
func clusterResult(work string, samples ...[]figures) result {
	var s scenario
	for _, sc := range clusterScenarios() {
		if sc.cluster.work == work {
			s = sc
		}
	}
	return resultOf(s, samples...)
}

// The cluster table's ratios divide medians: warren by raw on each
// broker, and the cluster by the single node for each side.
func TestClusterRow(t *testing.T) {
	r := clusterResult("consume",
		rates(90, 100, 110),     // raw, single
		rates(120, 80, 100, 60), // warren, single: median 90
		rates(40, 50, 60),       // raw, cluster
		rates(45, 45, 1000),     // warren, cluster
	)
	row, ok := clusterRowOf(r)
	if !ok {
		t.Fatal("a cluster scenario with every variant measured has no row")
	}
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"warren ÷ raw, single", row.warrenSingleRatio, 0.9},
		{"warren ÷ raw, cluster", row.warrenClusterRatio, 0.9},
		{"cluster ÷ single, raw", row.rawClusterRatio, 0.5},
		{"cluster ÷ single, warren", row.warrenClusterToSingle, 0.5},
		{"warren, cluster spread high", row.hi[warrenCluster], 1000},
		{"warren, single spread low", row.lo[warrenSingle], 60},
	} {
		if diff := c.got - c.want; diff > 1e-9 || diff < -1e-9 {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}

	// A variant left out (by -variant) leaves no row to compute.
	partial := r
	partial.scenario.variants = partial.scenario.variants[:2]
	partial.samples = partial.samples[:2]
	if _, ok := clusterRowOf(partial); ok {
		t.Error("a cluster scenario without its cluster variants has a row")
	}
	if _, ok := clusterRowOf(resultOf(scenario{name: "consume", variants: []variant{{}}}, rates(1))); ok {
		t.Error("a scenario that is no cluster scenario has a row")
	}
}

// The verdict is met only when every kind of work was measured on both
// brokers, and says which are missing otherwise.
func TestClusterVerdict(t *testing.T) {
	full := func(work string) result {
		return clusterResult(work, rates(1), rates(1), rates(1), rates(1))
	}
	if met, text := clusterVerdict(nil); met || text != "" {
		t.Errorf("verdict without cluster scenarios = %v, %q; want none", met, text)
	}
	met, text := clusterVerdict([]result{full("consume"), full("consume + redis dedup"), full("relay")})
	if !met || !strings.HasPrefix(text, "**Verdict: met.**") {
		t.Errorf("verdict with all three = %v, %q; want met", met, text)
	}
	met, text = clusterVerdict([]result{full("consume"), full("relay")})
	if met || !strings.Contains(text, "not met") || !strings.Contains(text, "consume + redis dedup") {
		t.Errorf("verdict without dedup = %v, %q; want not met, naming it", met, text)
	}

	var b strings.Builder
	renderCluster(&b, []result{full("consume")})
	if !strings.Contains(b.String(), "| consume | 1.0 (1.0 – 1.0) |") {
		t.Errorf("cluster table lacks the consume row:\n%s", b.String())
	}
}

// Cluster and sizing scenarios stay out of the ratio chart: their ratios
// are not warren's to a raw client.
func TestChartLeavesOutClusterAndSizing(t *testing.T) {
	r := clusterResult("relay", rates(1), rates(1), rates(1), rates(1))
	var sizing result
	for _, s := range sizingScenarios() {
		if s.name == "sizing: relays" {
			sizing = resultOf(s, rates(1), rates(1), rates(1), rates(1), rates(1))
		}
	}
	if bars := ratioBars([]result{r, sizing}); len(bars) != 0 {
		t.Errorf("bars = %+v; want none", bars)
	}
}

// Quorum measurements declare quorum queues, keeping the caller's
// arguments and leaving them unchanged; classic ones pass them through.
func TestQueueArgs(t *testing.T) {
	args := amqp.Table{"x-max-length": int64(1000)}
	classic := &env{}
	if got := classic.queueArgs(nil); got != nil {
		t.Errorf("classic queueArgs(nil) = %v, want nil", got)
	}
	quorum := &env{quorum: true}
	got := quorum.queueArgs(args)
	if got["x-queue-type"] != "quorum" || got["x-max-length"] != int64(1000) {
		t.Errorf("quorum queueArgs = %v", got)
	}
	if _, changed := args["x-queue-type"]; changed {
		t.Error("queueArgs changed its argument")
	}
}

func TestPerUnit(t *testing.T) {
	f := perUnit(20000, 4, 2*time.Second)
	if len(f) != 2 || f[0] != 10000 || f[1] != 2500 {
		t.Errorf("perUnit(20000, 4, 2s) = %v, want [10000 2500]", f)
	}
	if plural(1, "queue") != "1 queue" || plural(4, "queue") != "4 queues" {
		t.Error("plural")
	}
}

// The sizing scenarios name no cluster, so -run cluster selects the
// cluster scenarios alone; and their ratio columns say what they divide by.
func TestSizingNames(t *testing.T) {
	for _, s := range sizingScenarios() {
		if strings.Contains(s.name, "cluster") {
			t.Errorf("sizing scenario %q would be selected by -run cluster", s.name)
		}
		if s.ratioTo == "" || !s.variants[0].baseline {
			t.Errorf("sizing scenario %q: ratios need ratioTo and its first variant as the baseline", s.name)
		}
	}
}

func TestBarrier(t *testing.T) {
	ctx := context.Background()
	b := newBarrier(2)
	errs := make(chan error, 2)
	for range 2 {
		go func() { errs <- b.wait(ctx, nil) }()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Errorf("wait = %v, want nil once both arrived", err)
		}
	}
	b.fail() // after everyone arrived: nothing to release

	failing := newBarrier(3)
	go func() { errs <- failing.wait(ctx, nil) }()
	failing.fail() // a third never arrives: it failed first
	if err := <-errs; err == nil {
		t.Error("a waiter was not told that another failed")
	}
	if err := failing.wait(ctx, nil); err == nil {
		t.Error("a late arrival after a failure got nil")
	}
}
