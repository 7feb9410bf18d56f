package main

import (
	"bufio"
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/warrenmq/warren/consumer"
	"github.com/warrenmq/warren/internal/testenv/localrabbit"
)

// brokerMode is what the harness runs RabbitMQ as.
type brokerMode string

const (
	// brokerSingle: one private node, classic queues.
	brokerSingle brokerMode = "single"
	// brokerCluster: a private three-node cluster; every process is given
	// all three nodes' URLs and the consumers declare quorum queues.
	brokerCluster brokerMode = "cluster"
	// clusterNodes is the cluster's size: the smallest that keeps a
	// quorum through the loss of one node.
	clusterNodes = 3
)

func (h *harness) clustered() bool { return h.broker == brokerCluster }

// The cluster's faults. Each is injected with the fault that undoes it
// right after (undoFault), each half measured on its own: events must flow
// with a node gone, and again once it is back.
const (
	faultNodeKill     faultKind = "cluster: kill -9 of the node leading the consumers' queues"
	faultNodeRestart  faultKind = "cluster: the killed node restarted (it rejoins)"
	faultNodeStopApp  faultKind = "cluster: stop_app of a node not leading the queues"
	faultNodeStartApp faultKind = "cluster: start_app of the stopped node"
)

// undoFault is the fault scheduled right after each cluster fault, which
// brings the node back.
var undoFault = map[faultKind]faultKind{faultNodeKill: faultNodeRestart, faultNodeStopApp: faultNodeStartApp}

// isClusterFault reports whether kind acts on one node of a cluster.
func isClusterFault(kind faultKind) bool {
	switch kind {
	case faultNodeKill, faultNodeRestart, faultNodeStopApp, faultNodeStartApp:
		return true
	}
	return false
}

// isUndo reports whether kind only undoes the cluster fault before it.
func isUndo(kind faultKind) bool { return kind == faultNodeRestart || kind == faultNodeStartApp }

// leftOutOnCluster are the single node's faults the cluster mode does not
// inject, and why (the report lists them).
var leftOutOnCluster = map[faultKind]string{
	faultBrokerRestart: "the single node's stop_app / start_app is, on a cluster, the stop_app and start_app of one node (the cluster faults), aimed at a node that leads no consumer queue; the leader's loss is the kill -9",
	faultBrokerOutage: "every node down at once is a full-cluster restart: quorum queues serve nothing without a majority, and RabbitMQ itself orders the nodes' return (the last one down must start first), so it tests RabbitMQ's recovery more than warren's; " +
		"warren's reconnect through a whole-broker outage is the single-node mode's fault",
	faultBackpressure: "the relays read a quorum queue's depth as they read a classic one's (a passive queue.declare, answered by the leader), so the episode would prove nothing on a cluster the single node's does not, and it would add its length to CI's longest run; the cluster's relays still run with --hold-back-queue",
}

// adaptedOnCluster are the single node's faults that act differently on
// a cluster (the report lists them).
var adaptedOnCluster = map[faultKind]string{
	faultCloseConns:  "`rabbitmqctl close_all_connections` run on every node at once, so each process loses its connection whichever node it is on",
	faultMemoryAlarm: "the watermark is lowered on the node leading the webhook queue only: a resource alarm on any node blocks publishers on every node, which the probe connection (to a random node) confirms",
}

// clusterCounts adapts a mode's fault counts to a cluster: the left-out
// kinds go, the cluster's come in.
func clusterCounts(m mode) map[faultKind]int {
	out := maps.Clone(m.counts)
	for k := range leftOutOnCluster {
		delete(out, k)
	}
	maps.Copy(out, m.clusterCounts)
	return out
}

// checkBrokerFaults refuses fault kinds the broker mode cannot inject.
func checkBrokerFaults(b brokerMode, counts map[faultKind]int) error {
	for k := range counts {
		if why, ok := leftOutOnCluster[k]; ok && b == brokerCluster {
			return fmt.Errorf("%s is not injected with -broker cluster: %s", k, why)
		}
		if isClusterFault(k) && b != brokerCluster {
			return fmt.Errorf("%s needs -broker cluster", k)
		}
	}
	return nil
}

// reportName is the long mode's report, in docs/reliability: the CDC
// relays' and the cluster's evidence do not overwrite the polling relays'
// on one node.
func reportName(rm relayMode, b brokerMode) string {
	name := "RELIABILITY"
	if rm == relayCDC {
		name += "-cdc"
	}
	if b == brokerCluster {
		name += "-cluster"
	}
	return name + ".md"
}

// amqpURL is what every process and the harness's own connections dial:
// the node's URL, or all the cluster's, separated by commas (each dial
// starts from a random one).
func (h *harness) amqpURL() string {
	if h.clustered() {
		return strings.Join(h.cluster.URLs(), ",")
	}
	return h.rabbit.URL()
}

// startBroker starts the run's RabbitMQ: one node, or a cluster.
func (h *harness) startBroker(ctx context.Context) error {
	dir := filepath.Join(h.dir, "rabbitmq")
	if !h.clustered() {
		var err error
		h.rabbit, err = startRabbit(ctx, dir)
		if err == nil {
			h.timings["start RabbitMQ"] = h.rabbit.Startup
		}
		return err
	}
	cl, err := localrabbit.StartCluster(ctx, dir, "rel", clusterNodes)
	if err != nil {
		return err
	}
	h.cluster = cl
	h.timings["start RabbitMQ (three-node cluster)"] = cl.Startup
	return nil
}

// brokerText names the broker for the log.
func (h *harness) brokerText() string {
	if h.clustered() {
		return fmt.Sprintf("RabbitMQ cluster [%s] (%v)", h.cluster, h.cluster.Startup.Round(time.Millisecond))
	}
	return fmt.Sprintf("RabbitMQ %s (%v)", h.rabbit.node, h.rabbit.Startup.Round(time.Millisecond))
}

// stopBroker stops the node or every node of the cluster.
func (h *harness) stopBroker() {
	if h.rabbit != nil {
		h.rabbit.Stop()
	}
	if h.cluster != nil {
		h.cluster.Stop()
	}
}

// eachNode runs rabbitmqctl with args on every node whose application
// runs, at once.
func (h *harness) eachNode(ctx context.Context, args ...string) error {
	if !h.clustered() {
		return h.rabbit.ctl(ctx, args...)
	}
	errs := make([]error, clusterNodes)
	var wg sync.WaitGroup
	for i, n := range h.cluster.Nodes() {
		if i == h.nodeDown || i == h.appStopped {
			continue
		}
		wg.Go(func() { errs[i] = n.Ctl(ctx, args...) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return fmt.Errorf("node %d: %w", i, err)
		}
	}
	return nil
}

// alarmNode is the node whose memory watermark the memory alarm lowers
// (see adaptedOnCluster), and its rabbitmqctl.
func (h *harness) alarmNode(ctx context.Context) (string, func(context.Context, ...string) error, error) {
	if !h.clustered() {
		return "", h.rabbit.ctl, nil
	}
	i, err := h.leaderOf(ctx, webhookQueue)
	if err != nil {
		// Any node's alarm blocks the whole cluster: the leader is the
		// better aim, not a condition.
		i = 0
		return fmt.Sprintf("on node %d (the webhook queue's leader could not be read: %v)", i, err), h.cluster.Nodes()[i].Ctl, nil
	}
	return fmt.Sprintf("on node %d (it leads the webhook queue)", i), h.cluster.Nodes()[i].Ctl, nil
}

// leaderOf waits (up to 90s: right after a node's loss the members may
// still be electing, and rabbitmqctl starts a VM of its own, which takes
// more than 10s on a loaded two-core machine) for a running node to name
// the leader of queue.
func (h *harness) leaderOf(ctx context.Context, queue string) (int, error) {
	deadline := time.Now().Add(90 * time.Second)
	for {
		qctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		i, err := h.cluster.QueueLeader(qctx, "/", queue)
		cancel()
		if err == nil && i != h.nodeDown && i != h.appStopped {
			return i, nil
		}
		if err == nil {
			err = fmt.Errorf("leader of %s still named as node %d, which is down", queue, i)
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return -1, err
		}
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// consumerQueues are the consumers' main queues, whose leaders the node
// faults look for.
var consumerQueues = []string{
	consumer.TopologyFor(consumer.Config{Name: webhookQueue, Exchange: exchange}).Queue,
	consumer.TopologyFor(consumer.Config{Name: autoQueue, Exchange: exchange}).Queue,
}

// injectNodeFault applies one cluster fault to f.
func (h *harness) injectNodeFault(ctx context.Context, f *faultRecord) error {
	nodes := h.cluster.Nodes()
	leaders := map[int][]string{}
	if f.kind == faultNodeKill || f.kind == faultNodeStopApp {
		for _, q := range consumerQueues {
			i, err := h.leaderOf(ctx, q)
			if err != nil {
				return err
			}
			leaders[i] = append(leaders[i], q)
		}
	}
	switch f.kind {
	case faultNodeKill:
		i, err := h.leaderOf(ctx, consumerQueues[0])
		if err != nil {
			return err
		}
		f.node, f.onNode = i, h.procsOnPort(nodes[i].Port)
		f.target = fmt.Sprintf("node %d, leading %s; connections of %s", i, strings.Join(leaders[i], " and "), namesOrNone(f.onNode))
		f.start = time.Now()
		h.cluster.Kill(i)
		h.nodeDown = i
		h.timeReconnect(ctx, f, nodes[i].Port)
	case faultNodeRestart:
		i := h.nodeDown
		f.node = i
		f.start = time.Now()
		if err := h.cluster.Restart(ctx, i); err != nil {
			return err
		}
		h.nodeDown = -1
		f.target = fmt.Sprintf("node %d, back in the cluster after %v", i, time.Since(f.start).Round(100*time.Millisecond))
	case faultNodeStopApp:
		// A node that leads neither consumer queue, if there is one,
		// otherwise one that does not lead the webhook's; of those, the
		// one holding most processes' connections (a node nobody uses
		// tests nothing).
		var cands, fallback []int
		for i := range nodes {
			if i == h.nodeDown {
				continue
			}
			if len(leaders[i]) == 0 {
				cands = append(cands, i)
			} else if !slices.Contains(leaders[i], consumerQueues[0]) {
				fallback = append(fallback, i)
			}
		}
		on := map[int][]string{}
		for _, i := range append(slices.Clone(cands), fallback...) {
			on[i] = h.procsOnPort(nodes[i].Port)
		}
		best := func(c []int) int {
			b := -1
			for _, i := range c {
				if b < 0 || len(on[i]) > len(on[b]) {
					b = i
				}
			}
			return b
		}
		i := best(cands)
		if i < 0 || len(on[i]) == 0 {
			if j := best(fallback); j >= 0 && (i < 0 || len(on[j]) > 0) {
				i = j
			}
		}
		if i < 0 {
			return fmt.Errorf("no node to stop: every running node leads the webhook queue")
		}
		f.node, f.onNode = i, on[i]
		led := "no consumer queue"
		if len(leaders[i]) > 0 {
			led = strings.Join(leaders[i], " and ")
		}
		f.target = fmt.Sprintf("node %d, leading %s; connections of %s", i, led, namesOrNone(f.onNode))
		f.start = time.Now()
		if err := h.cluster.StopApp(ctx, i); err != nil {
			return err
		}
		h.appStopped = i
		h.timeReconnect(ctx, f, nodes[i].Port)
	case faultNodeStartApp:
		i := h.appStopped
		f.node = i
		f.start = time.Now()
		if err := h.cluster.StartApp(ctx, i); err != nil {
			return err
		}
		h.appStopped = -1
		f.target = fmt.Sprintf("node %d, running again after %v", i, time.Since(f.start).Round(100*time.Millisecond))
	}
	return nil
}

// pendingUndo reports whether the undo fault kind has a node to bring
// back (its cluster fault was injected).
func (h *harness) pendingUndo(kind faultKind) bool {
	switch kind {
	case faultNodeRestart:
		return h.nodeDown >= 0
	case faultNodeStartApp:
		return h.appStopped >= 0
	}
	return false
}

// restoreCluster brings back a node a cluster fault left down, when the
// fault phase ended before its undo (no recovery, or a signal): the drain
// and the checks run on the whole cluster.
func (h *harness) restoreCluster(ctx context.Context) error {
	if !h.clustered() {
		return nil
	}
	if i := h.nodeDown; i >= 0 {
		if err := h.cluster.Restart(ctx, i); err != nil {
			return fmt.Errorf("restart node %d after the fault phase: %w", i, err)
		}
		h.nodeDown = -1
	}
	if i := h.appStopped; i >= 0 {
		if err := h.cluster.StartApp(ctx, i); err != nil {
			return fmt.Errorf("start_app on node %d after the fault phase: %w", i, err)
		}
		h.appStopped = -1
	}
	return nil
}

// timeReconnect measures, in the background, how long after the fault
// every process that held a connection to the lost node (port) holds one
// to another node and answers /readyz again: f.readyAgain.
func (h *harness) timeReconnect(ctx context.Context, f *faultRecord, port int) {
	var on []*proc
	for _, name := range f.onNode {
		if p := h.procNamed(name); p != nil {
			on = append(on, p)
		}
	}
	ports := map[int]bool{}
	for _, n := range h.cluster.Nodes() {
		ports[n.Port] = true
	}
	h.bg.Go(func() {
		deadline := f.start.Add(h.mode.recoveryTimeout)
		for time.Now().Before(deadline) {
			back := true
			for _, p := range on {
				if !p.ready(ctx) || !p.connectedElsewhere(port, ports) {
					back = false
					break
				}
			}
			if back {
				f.readyAgain = max(time.Since(f.start), time.Millisecond)
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	})
}

func namesOrNone(names []string) string {
	if len(names) == 0 {
		return "no process"
	}
	return strings.Join(names, ", ")
}

// procsOnPort names the supervised processes holding an established TCP
// connection to 127.0.0.1:port (a node's AMQP port), read from /proc.
func (h *harness) procsOnPort(port int) []string {
	var out []string
	for _, p := range h.procs {
		if p.connectedTo(port) {
			out = append(out, p.spec.name)
		}
	}
	slices.Sort(out)
	return out
}

// connectedTo reports whether the process holds an established connection
// to port.
func (p *proc) connectedTo(port int) bool {
	return len(p.peerPorts(func(remote int) bool { return remote == port })) > 0
}

// connectedElsewhere reports whether the process holds an established
// connection to one of ports (the cluster's AMQP ports) other than lost.
func (p *proc) connectedElsewhere(lost int, ports map[int]bool) bool {
	return len(p.peerPorts(func(remote int) bool { return remote != lost && ports[remote] })) > 0
}

// peerPorts returns the remote ports of the process's established TCP
// connections that keep says to.
func (p *proc) peerPorts(keep func(int) bool) []int {
	p.mu.Lock()
	var pid int
	if p.cmd != nil && p.cmd.Process != nil {
		pid = p.cmd.Process.Pid
	}
	p.mu.Unlock()
	if pid == 0 {
		return nil
	}
	inodes := map[string]int{} // socket inode → remote port
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(table)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			// local, remote, state (01: established), …, inode
			if len(fields) < 10 || fields[3] != "01" {
				continue
			}
			_, hexPort, ok := strings.Cut(fields[2], ":")
			if !ok {
				continue
			}
			port, err := strconv.ParseInt(hexPort, 16, 32)
			if err == nil && keep(int(port)) {
				inodes["socket:["+fields[9]+"]"] = int(port)
			}
		}
		f.Close()
	}
	if len(inodes) == 0 {
		return nil
	}
	var out []int
	fdDir := fmt.Sprintf("/proc/%d/fd", pid)
	fds, _ := os.ReadDir(fdDir)
	for _, fd := range fds {
		if link, err := os.Readlink(filepath.Join(fdDir, fd.Name())); err == nil {
			if port, ok := inodes[link]; ok {
				out = append(out, port)
			}
		}
	}
	return out
}

// nodeLoss is a time a cluster fault took a node away from the processes
// connected to it.
type nodeLoss struct {
	kind     faultKind
	node     int
	from, to time.Time // the fault, to when events flowed again
	procs    []string  // connected to the node when it went
}

// nodeLosses are the run's kills and stop_apps of a node, each until
// events flowed again (or, without recovery, until the next fault).
func (h *harness) nodeLosses() []nodeLoss {
	var out []nodeLoss
	for i, f := range h.faults {
		if f.kind != faultNodeKill && f.kind != faultNodeStopApp {
			continue
		}
		to := f.end.Add(f.recovery)
		if !f.recovered {
			to = time.Now()
			if i+1 < len(h.faults) {
				to = h.faults[i+1].start
			}
		}
		out = append(out, nodeLoss{kind: f.kind, node: f.node, from: f.start, to: to, procs: f.onNode})
	}
	return out
}

// nodeFaultBefore returns the cluster fault in force at t: the last one
// that started before t, if t is before the next fault's start. A process
// exit then is laid to it.
func (h *harness) nodeFaultBefore(t time.Time) *faultRecord {
	var last *faultRecord
	for i, f := range h.faults {
		if f.start.After(t) {
			break
		}
		last = nil
		if isClusterFault(f.kind) && (i+1 == len(h.faults) || h.faults[i+1].start.After(t)) {
			last = f
		}
	}
	return last
}

// brokerIntro names the run's broker for the report's first paragraph.
func (r *result) brokerIntro() string {
	if r.broker == brokerCluster {
		return "three-node RabbitMQ cluster (every process given all three nodes' URLs, the consumers' queues quorum queues)"
	}
	return "RabbitMQ node"
}

// clusterMarkdown is the report's section on the cluster: every cluster
// fault with its own figures, and the single node's faults adapted or
// left out.
func (r *result) clusterMarkdown(w func(string, ...any)) {
	w("## The cluster\n\n")
	w("Three private nodes joined into one cluster at start-up. Every relay and consumer is given the three nodes' URLs (`AMQP_URL`, comma-separated: each dial tries the nodes starting from a random one, so the processes spread over the nodes), and the consumers declare their queues as quorum queues (`WARREN_QUEUE_TYPE=quorum`): the main queues, the retry tiers and the DLQs, with at-least-once dead-lettering from the retry tiers back to their queue. ")
	w("Each cluster fault is followed by the one that brings its node back, with only the usual gap and the probe between them, and each is measured on its own: events must flow with the node gone and again once it is back. ")
	w("The kill is `kill -9` of the node's VM, aimed at the node that leads the webhook queue (`rabbitmqctl list_queues name leader`); the restart starts it with the same name, ports and data and returns once it is back in the cluster. The stop_app is aimed at a node that leads neither consumer's queue (or, if none, not the webhook's). ")
	w("*Events flow again*: from the fault (for the restart and the start_app, from the node being back in the cluster) until a probe event committed after it has reached both consumers' effects. ")
	w("*Reconnected*: until every process that held a connection to the lost node (read from `/proc`) holds one to another node and answers `/readyz`. ")
	w("No process may exit on a node's loss: the supervisor restarts a process only after it exits, so an exit would hide a failure to reconnect, and fails the run.\n\n")
	w("| # | at | fault | node | events flow again | reconnected | catch-up | backlog |\n|---:|---|---|---|---|---|---|---:|\n")
	n := 0
	for _, f := range r.faults {
		if !isClusterFault(f.kind) {
			continue
		}
		n++
		flow := "**none within the recovery timeout**"
		if f.recovered {
			flow = fmtDur(f.recovery)
		}
		reconnected := "–"
		if f.kind == faultNodeKill || f.kind == faultNodeStopApp {
			switch {
			case len(f.onNode) == 0:
				reconnected = "nothing to reconnect"
			case f.readyAgain > 0:
				reconnected = fmtDur(f.readyAgain)
			default:
				reconnected = "**not within the recovery timeout**"
			}
		}
		catch := "not caught up by the end"
		if f.caughtUp {
			catch = fmtDur(f.catchUp)
		}
		w("| %d | %s | %s | %s | %s | %s | %s | %d |\n", n, f.start.Format("15:04:05"), f.kind, strings.ReplaceAll(f.target, "|", "\\|"), flow, reconnected, catch, f.backlog)
	}
	if n == 0 {
		w("| | | no cluster fault was injected | | | | | |\n")
	}
	w("\nProcess exits on a node's loss: %d", len(r.nodeLossExits))
	if len(r.nodeLossExits) > 0 {
		w(" (%s)", strings.Join(r.nodeLossExits, "; "))
	}
	w(". Consumer reconnects over the run (their stats, sampled every second): webhook %d, automation %d.\n\n", r.stats["webhook"].Reconnects, r.stats["automation"].Reconnects)
	w("The single node's faults, adapted to the cluster:\n\n")
	for _, k := range faultOrder {
		if why, ok := adaptedOnCluster[k]; ok {
			w("- %s: %s.\n", k, why)
		}
	}
	w("\nLeft out on the cluster:\n\n")
	for _, k := range faultOrder {
		if why, ok := leftOutOnCluster[k]; ok {
			w("- %s: %s.\n", k, why)
		}
	}
	w("\n")
}
