package main

import (
	"context"
	"fmt"
	"maps"
	"math"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/internal/testenv/localrabbit"
)

// The cluster scenarios (issue 19) measure the same work on the shared
// single node with classic queues and on a private three-node cluster
// with quorum queues, in one run: consume with a no-op handler, consume
// with Redis dedup, and the relay draining an outbox backlog. Each has a
// raw amqp091-go baseline and warren on each broker, so the report can
// tell what quorum replication costs the client libraries themselves from
// what warren adds on top of it.

// clusterNodes is the size of the bench's cluster: the smallest that
// survives the loss of a node, and what docs/scaling.md recommends.
const clusterNodes = 3

// clusterWork is one kind of work measured on both brokers.
type clusterWork struct {
	name        string // "consume", "consume + redis dedup", "relay"
	raw, warren runFunc
	rawName     string
	warrenName  string
}

func clusterWorks() []clusterWork {
	return []clusterWork{
		{name: "consume", rawName: "raw: 16 channels, ack multiple every 100", raw: rawConsume(16, 100, nil),
			warrenName: "warren: BaseConsumer defaults", warren: warrenConsume(nil)},
		{name: "consume + redis dedup", rawName: "raw: 16 channels, SET NX then ack", raw: rawConsume(16, 1, rawRedisSetNX),
			warrenName: "warren: Dedup, redis store", warren: warrenConsumeWith(nil, warrenRedisDedup)},
		{name: "relay", rawName: "raw: claim 500, publish, confirm, delete", raw: rawRelay,
			warrenName: "warren: relay.Run defaults", warren: warrenRelay(nil)},
	}
}

// The two brokers, as the variants' names and the report call them.
const (
	singleBroker  = "single node, classic"
	clusterBroker = "3 nodes, quorum"
)

// clusterPoint marks a cluster scenario: its variants are, in this order,
// raw and warren on the single node, then raw and warren on the cluster.
type clusterPoint struct {
	work string
}

// The variants' places in a cluster scenario.
const (
	rawSingle = iota
	warrenSingle
	rawCluster
	warrenCluster
	clusterVariants
)

const clusterAbout = "The same workload on two brokers in one run, alternating: the shared single RabbitMQ node with classic queues " +
	"(the other scenarios' broker), and a private cluster of three nodes of the same RabbitMQ, started by the bench for the run " +
	"(localrabbit.StartCluster, stopped and deleted at its end), with every queue a quorum queue (raw: `x-queue-type: quorum`; " +
	"warren: `consumer.Config.QueueType = Quorum`) and the clients given the three nodes' URLs as one comma-separated list, " +
	"from which each connection picks a node at random (so a client may or may not sit on its queue's leader). " +
	"consume: 16 channels acking multiple every 100 against a BaseConsumer at its defaults; consume + redis dedup: " +
	"16 channels each doing `SET NX PX` then ack, against the Dedup middleware on the redis store; relay: the relay " +
	"scenario's raw claim / publish / confirm / delete loop against relay.Run at its defaults, publishing to an exchange bound " +
	"to one queue that keeps its last 1,000 messages."

func clusterScenarios() []scenario {
	var out []scenario
	for _, w := range clusterWorks() {
		out = append(out, scenario{
			name:    "cluster: " + w.name,
			about:   clusterAbout,
			cluster: &clusterPoint{work: w.name},
			variants: []variant{
				rawSingle:     {name: w.rawName + ", " + singleBroker, baseline: true, run: w.raw},
				warrenSingle:  {name: w.warrenName + ", " + singleBroker, run: w.warren},
				rawCluster:    {name: w.rawName + ", " + clusterBroker, baseline: true, run: onCluster(w.raw)},
				warrenCluster: {name: w.warrenName + ", " + clusterBroker, run: onCluster(w.warren)},
			},
		})
	}
	return out
}

// onCluster runs run against the bench's cluster, with quorum queues.
func onCluster(run runFunc) runFunc {
	return func(ctx context.Context, e *env) (figures, error) {
		g, err := clusterEnv(ctx, e)
		if err != nil {
			return nil, err
		}
		return run(ctx, g)
	}
}

// onQuorum runs run against e's broker with quorum queues.
func onQuorum(run runFunc) runFunc {
	return func(ctx context.Context, e *env) (figures, error) {
		g := *e
		g.quorum = true
		return run(ctx, &g)
	}
}

// queueArgs is args (which it does not change) with the queue type e asks
// for: nil args stay nil on classic queues.
func (e *env) queueArgs(args amqp.Table) amqp.Table {
	if !e.quorum {
		return args
	}
	out := amqp.Table{"x-queue-type": "quorum"}
	maps.Copy(out, args)
	return out
}

// benchCluster is the run's cluster, started by the first measurement
// that needs it and stopped by stopCluster when the run ends.
var benchCluster struct {
	once sync.Once
	dir  string
	c    *localrabbit.Cluster
	url  string
	err  error
}

// clusterEnv is a copy of e on the bench's cluster, with quorum queues.
func clusterEnv(ctx context.Context, e *env) (*env, error) {
	benchCluster.once.Do(func() {
		dir, err := os.MkdirTemp("", "warren-bench-cluster-")
		if err != nil {
			benchCluster.err = err
			return
		}
		benchCluster.dir = dir
		fmt.Fprintf(os.Stderr, "   starting a private %d-node RabbitMQ cluster in %s\n", clusterNodes, dir)
		c, err := localrabbit.StartCluster(ctx, dir, "bench", clusterNodes)
		if err != nil {
			benchCluster.err = fmt.Errorf("starting the bench's cluster: %w", err)
			return
		}
		benchCluster.c, benchCluster.url = c, strings.Join(c.URLs(), ",")
		fmt.Fprintf(os.Stderr, "   cluster running after %v: %s\n", c.Startup.Round(time.Second), c)
	})
	if benchCluster.err != nil {
		return nil, benchCluster.err
	}
	g := *e
	g.amqpURL, g.quorum = benchCluster.url, true
	return &g, nil
}

// stopCluster stops the bench's cluster, if a measurement started it, and
// deletes its directory. The nodes die with the bench in any case (the
// kernel kills them), so a killed run leaves only the directory.
func stopCluster() {
	if benchCluster.c != nil {
		fmt.Fprintln(os.Stderr, "   stopping the cluster")
		benchCluster.c.Stop()
	}
	if benchCluster.dir != "" {
		os.RemoveAll(benchCluster.dir)
	}
}

// clusterRow is one cluster scenario's medians and the ratios the report
// gives them.
type clusterRow struct {
	work string
	// Medians and spreads, by variant place (rawSingle …).
	med, lo, hi [clusterVariants]float64
	// warren ÷ raw on each broker, and cluster ÷ single for each side.
	warrenSingleRatio, warrenClusterRatio  float64
	rawClusterRatio, warrenClusterToSingle float64
}

// clusterRowOf computes r's row; ok is false unless r is a cluster
// scenario with every variant measured.
func clusterRowOf(r result) (row clusterRow, ok bool) {
	if r.scenario.cluster == nil || len(r.samples) != clusterVariants {
		return row, false
	}
	row.work = r.scenario.cluster.work
	for i := range clusterVariants {
		xs := r.column(i, 0)
		if len(xs) == 0 {
			return row, false
		}
		row.med[i], row.lo[i], row.hi[i] = median(xs), slices.Min(xs), slices.Max(xs)
	}
	row.warrenSingleRatio = row.med[warrenSingle] / row.med[rawSingle]
	row.warrenClusterRatio = row.med[warrenCluster] / row.med[rawCluster]
	row.rawClusterRatio = row.med[rawCluster] / row.med[rawSingle]
	row.warrenClusterToSingle = row.med[warrenCluster] / row.med[warrenSingle]
	return row, true
}

// clusterVerdict says whether the run answered issue 19's ask: every
// kind of work measured on both brokers by both sides, in this run.
func clusterVerdict(results []result) (met bool, text string) {
	measured := map[string]bool{}
	for _, r := range results {
		if row, ok := clusterRowOf(r); ok {
			measured[row.work] = true
		}
	}
	if len(measured) == 0 {
		return false, ""
	}
	var missing []string
	for _, w := range clusterWorks() {
		if !measured[w.name] {
			missing = append(missing, w.name)
		}
	}
	const ask = "The bench compares single-node classic queues with a three-node quorum cluster for consume (no-op and with Redis dedup) and relay, as ratios in one run"
	if len(missing) > 0 {
		return false, fmt.Sprintf("**Verdict: not met.** %s: this run did not measure %s on both brokers (select all of them with `-run cluster`).",
			ask, strings.Join(missing, ", "))
	}
	return true, "**Verdict: met.** " + ask + ": the table below has every one, raw and warren on each broker, from this run."
}

// renderCluster writes the cluster scenarios' section: one table of
// medians and ratios, and what makes the ratios what they are.
func renderCluster(b *strings.Builder, results []result) {
	var rows []clusterRow
	var about, size string
	rounds := 0
	for _, r := range results {
		if row, ok := clusterRowOf(r); ok {
			rows = append(rows, row)
			about, size, rounds = r.scenario.about, r.size, r.rounds
		}
	}
	if len(rows) == 0 {
		return
	}
	_, verdict := clusterVerdict(results)
	fmt.Fprintf(b, "\n## Single node, classic queues vs three-node cluster, quorum queues\n\n%s\n\n%s\n\nOne measurement: %s. Rounds: %d.\n\n", verdict, about, size, rounds)
	fmt.Fprintf(b, "| work | raw, %s msg/s | warren, %s msg/s | warren ÷ raw, single | raw, %s msg/s | warren, %s msg/s | warren ÷ raw, cluster | cluster ÷ single, raw | cluster ÷ single, warren |\n",
		singleBroker, singleBroker, clusterBroker, clusterBroker)
	fmt.Fprintf(b, "|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	cell := func(row clusterRow, i int) string {
		return fmt.Sprintf("%s (%s – %s)", num(row.med[i]), num(row.lo[i]), num(row.hi[i]))
	}
	for _, row := range rows {
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", row.work,
			cell(row, rawSingle), cell(row, warrenSingle), ratio2(row.warrenSingleRatio),
			cell(row, rawCluster), cell(row, warrenCluster), ratio2(row.warrenClusterRatio),
			ratio2(row.rawClusterRatio), ratio2(row.warrenClusterToSingle))
	}
	fmt.Fprintf(b, "\nWhy the ratios are what they are. The three nodes are three Erlang VMs on this machine's %d cores, which they share "+
		"with one another, with the single node, Postgres, Redis and the bench's own clients; in production each node has a machine of its own. "+
		"A quorum queue is a Raft log on three nodes: every publish is written by the leader and both followers, each fsyncing its log, "+
		"and confirmed once a majority has it; every ack (settle) is a Raft command the followers write too, so even draining a backlog "+
		"costs the cluster replicated writes. A classic queue keeps one copy, in its node's message store and queue index. "+
		"Here the cluster's replicated work comes out of the same %d cores, so where the cluster is slower than the single node on this "+
		"machine, the gap is wider than on separate machines, where the followers work in parallel with the leader and cost a network round "+
		"trip, not shared CPU; where it is faster, the queue type is what differs (the sizing scenarios run quorum queues on the single node "+
		"too: `-run sizing`). A quorum queue has one leader, through which all its messages pass, so a cluster makes one queue safer, not faster "+
		"(docs/scaling.md).\n", runtime.NumCPU(), runtime.NumCPU())
	fmt.Fprintf(b, "\nRead the columns in pairs. *cluster ÷ single, raw* is what the quorum cluster costs the bare client libraries: "+
		"RabbitMQ's own price for replication. *cluster ÷ single, warren* is the same for warren; where it is close to the raw one, "+
		"warren adds nothing of its own on a cluster, and *warren ÷ raw, cluster* next to *warren ÷ raw, single* says the same from the other side.\n")
}

// ratio2 is a ratio with two decimals, or "–" where it could not be
// computed.
func ratio2(x float64) string {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return "–"
	}
	return fmt.Sprintf("%.2f", x)
}
