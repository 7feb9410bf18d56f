package localrabbit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ClusterPlugins are the plugins every cluster node runs: the
// consistent-hash exchange spreads a stream over several queues, which is
// what a cluster is for.
var ClusterPlugins = []string{"rabbitmq_consistent_hash_exchange"}

// Cluster is private RabbitMQ nodes joined into one cluster. Nodes are
// numbered from 0, and node i is named warren_<kind>_<pid>_<i>@localhost.
type Cluster struct {
	// Startup is how long the cluster took to start: every node running,
	// joined, and each seeing all the others.
	Startup time.Duration

	nodes []*Node

	mu         sync.Mutex
	appStopped []bool // by StopApp and not yet StartApp
}

// StartCluster runs n nodes, each on its own free ports with its own
// directory dir/<i>, sharing one random cookie, with [ClusterPlugins]
// enabled, joined into one cluster. It returns once node 0 reports all n
// running, for at most a few minutes or until ctx ends; on error no node
// is left running.
func StartCluster(ctx context.Context, dir, kind string, n int) (*Cluster, error) {
	if n < 1 {
		return nil, fmt.Errorf("localrabbit: a cluster of %d nodes", n)
	}
	cookie := newCookie()
	c := &Cluster{nodes: make([]*Node, n), appStopped: make([]bool, n)}
	name := func(i int) string { return fmt.Sprintf("%s%s_%d_%d@localhost", namePrefix, kind, os.Getpid(), i) }
	for i := range n {
		cfg := nodeConfig{
			name:    name(i),
			dir:     filepath.Join(dir, strconv.Itoa(i)),
			cookie:  cookie,
			plugins: ClusterPlugins,
		}
		if i > 0 {
			cfg.seed = name(0)
		}
		node, err := newNode(cfg)
		if err != nil {
			return nil, err
		}
		c.nodes[i] = node
	}
	begin := time.Now()
	if err := c.form(ctx); err != nil {
		c.Stop()
		return nil, err
	}
	c.Startup = time.Since(begin)
	return c, nil
}

// form boots node 0, then the other nodes together, and waits until node
// 0 sees them all running.
//
// Nodes 1..n-1 join node 0 as they boot (peer discovery, classic_config,
// with node 0 as the only seed; node 0 has no seed and always starts the
// cluster). That saves what stop_app, join_cluster and start_app cost
// after the boot (about 10 s of 33 on a busy two-core machine), and
// cannot split the nodes into several clusters the way symmetric seeds
// booting together can in 3.10.
//
// Node 0 boots alone first: a fresh 3.10 node enables every feature flag
// as it boots, and a node joining it meanwhile broke the boot twice in
// CI, once the joiner's (schema_integrity_check_failed: it took the
// flags for disabled and then copied migrated tables), once node 0's own
// (incompatible_feature_flags, "All replicas on diskfull nodes are not
// active yet": it enabled a flag while the joiner's replica was not
// up). It costs one boot's time. The joiners still boot together; one
// that fails its schema check all the same is booted again, alone, from
// an empty directory.
func (c *Cluster) form(ctx context.Context) error {
	if err := c.nodes[0].start(ctx); err != nil {
		return err
	}
	started := make([]error, len(c.nodes))
	each(c.nodes[1:], func(n *Node) error {
		started[c.index(n.Name)] = n.start(ctx)
		return nil
	})
	for i, err := range started[1:] {
		if err != nil && strings.Contains(err.Error(), schemaCheckFailed) {
			err = c.rejoinFresh(ctx, i+1)
		}
		if err != nil {
			return err
		}
	}
	if err := c.waitJoined(ctx, 0); err != nil {
		return err
	}
	// A cluster formed while another cluster of the same process was
	// still going was seen, on a busy machine, to refuse quorum queues
	// for over a minute ("the corresponding feature flag is disabled"):
	// a node joining may leave a flag disabled cluster-wide. Enabling
	// every flag on the formed cluster settles it before anyone declares.
	return c.nodes[0].Ctl(ctx, "enable_feature_flag", "all")
}

// schemaCheckFailed is how 3.10 reports that the tables a joining node
// copied do not match the feature flags it believes enabled.
const schemaCheckFailed = "schema_integrity_check_failed"

// rejoinFresh boots node i again, from an empty data directory, after a
// first boot that failed while joining: node 0 forgets it first (it may
// hold it as a member already), or the fresh node would clash with it.
func (c *Cluster) rejoinFresh(ctx context.Context, i int) error {
	n := c.nodes[i]
	c.nodes[0].Ctl(ctx, "forget_cluster_node", n.Name) // fails if it never became a member: fine
	if err := os.RemoveAll(filepath.Join(n.Dir, "mnesia")); err != nil {
		return err
	}
	return n.start(ctx)
}

// each runs f on every node at once and joins the errors.
func each(nodes []*Node, f func(*Node) error) error {
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() { errs[i] = f(n) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Nodes are the cluster's nodes, by index.
func (c *Cluster) Nodes() []*Node { return slices.Clone(c.nodes) }

// URLs are the nodes' AMQP URLs (guest/guest, default vhost), by index.
func (c *Cluster) URLs() []string {
	urls := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		urls[i] = n.URL()
	}
	return urls
}

// Kill sends SIGKILL to node i's VM and its helpers, and returns once it
// has exited: the other nodes see the connection drop, as when a machine
// dies. Restart starts it again.
func (c *Cluster) Kill(i int) { c.nodes[i].Kill() }

// Restart starts node i again, after Kill or Stop, with the same name,
// ports, cookie and data, so it rejoins the cluster by itself, and waits
// until it sees every node that should be running (VM alive, application
// not stopped by StopApp) running, itself included.
func (c *Cluster) Restart(ctx context.Context, i int) error {
	n := c.nodes[i]
	select {
	case <-n.Exited():
	default:
		return fmt.Errorf("localrabbit: %s is running; Kill or stop it before Restart", n.Name)
	}
	c.setAppStopped(i, false)
	if err := n.start(ctx); err != nil {
		return err
	}
	return c.waitJoined(ctx, i)
}

// StopApp stops the rabbit application on node i (rabbitmqctl stop_app):
// the VM stays up and in the cluster's membership, but the node serves no
// client and hosts no running queue member.
func (c *Cluster) StopApp(ctx context.Context, i int) error {
	if err := c.nodes[i].Ctl(ctx, "stop_app"); err != nil {
		return err
	}
	c.setAppStopped(i, true)
	return nil
}

// StartApp starts the rabbit application on node i again (rabbitmqctl
// start_app) and waits until it sees every node that should be running.
func (c *Cluster) StartApp(ctx context.Context, i int) error {
	if err := c.nodes[i].Ctl(ctx, "start_app"); err != nil {
		return err
	}
	c.setAppStopped(i, false)
	return c.waitJoined(ctx, i)
}

func (c *Cluster) setAppStopped(i int, stopped bool) {
	c.mu.Lock()
	c.appStopped[i] = stopped
	c.mu.Unlock()
}

// Stop shuts every node down at once. It may be called more than once,
// and after Kill.
func (c *Cluster) Stop() {
	each(c.nodes, func(n *Node) error {
		n.Stop()
		return nil
	})
}

// Running returns the indexes of the nodes that node i reports running
// (rabbitmqctl cluster_status: nodes whose rabbit application runs).
func (c *Cluster) Running(ctx context.Context, i int) ([]int, error) {
	out, err := c.nodes[i].CtlOutput(ctx, "cluster_status", "--formatter", "json")
	if err != nil {
		return nil, err
	}
	var status struct {
		RunningNodes []string `json:"running_nodes"`
	}
	if err := json.Unmarshal([]byte(out), &status); err != nil {
		return nil, fmt.Errorf("cluster_status of %s: %w: %s", c.nodes[i].Name, err, out)
	}
	var running []int
	for _, name := range status.RunningNodes {
		if j := c.index(name); j >= 0 {
			running = append(running, j)
		}
	}
	slices.Sort(running)
	return running, nil
}

// index is the index of the node named name, or -1.
func (c *Cluster) index(name string) int {
	return slices.IndexFunc(c.nodes, func(n *Node) bool { return n.Name == name })
}

// expected are the nodes that should be running: VM alive, application
// not stopped by StopApp.
func (c *Cluster) expected() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	var want []int
	for i, n := range c.nodes {
		select {
		case <-n.Exited():
			continue
		default:
		}
		if !c.appStopped[i] {
			want = append(want, i)
		}
	}
	return want
}

// joinTimeout bounds the wait for a node to see the cluster; generous,
// for a busy machine.
const joinTimeout = 3 * time.Minute

// waitJoined waits until node i reports every node that should be running
// as running: it has (re)joined the cluster and the others are back in
// its view. On timeout the error carries the node's log.
func (c *Cluster) waitJoined(ctx context.Context, i int) error {
	deadline := time.Now().Add(joinTimeout)
	for {
		want := c.expected()
		got, err := c.Running(ctx, i)
		if err == nil && isSubset(want, got) {
			return nil
		}
		if err == nil {
			err = fmt.Errorf("running nodes %v, want %v", got, want)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s has not joined the cluster after %v: %w\n%s", c.nodes[i].Name, joinTimeout, err, c.nodes[i].LogTail())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-c.nodes[i].Exited():
			return fmt.Errorf("%s exited while joining the cluster (last check: %w)\n%s", c.nodes[i].Name, err, c.nodes[i].LogTail())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func isSubset(small, big []int) bool {
	for _, x := range small {
		if !slices.Contains(big, x) {
			return false
		}
	}
	return true
}

// QueueLeader returns the index of the node that leads quorum queue queue
// in vhost, as a running node reports it (rabbitmqctl list_queues name
// leader, which 3.10 fills for quorum queues). Right after the leader
// dies the answer can still name it until the members elect another;
// poll until it names a live node.
func (c *Cluster) QueueLeader(ctx context.Context, vhost, queue string) (int, error) {
	var errs []error
	for _, i := range c.expected() {
		out, err := c.nodes[i].CtlOutput(ctx, "list_queues", "-p", vhost, "name", "type", "leader", "--formatter", "json")
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var rows []struct {
			Name   string `json:"name"`
			Type   string `json:"type"`
			Leader string `json:"leader"`
		}
		if err := json.Unmarshal([]byte(out), &rows); err != nil {
			return -1, fmt.Errorf("list_queues on %s: %w: %s", c.nodes[i].Name, err, out)
		}
		for _, r := range rows {
			if r.Name != queue {
				continue
			}
			if r.Type != "quorum" {
				return -1, fmt.Errorf("queue %q in vhost %q is a %s queue, not a quorum queue", queue, vhost, r.Type)
			}
			if j := c.index(r.Leader); j >= 0 {
				return j, nil
			}
			return -1, fmt.Errorf("queue %q: leader %q is no node of the cluster", queue, r.Leader)
		}
		return -1, fmt.Errorf("no queue %q in vhost %q", queue, vhost)
	}
	if len(errs) == 0 {
		return -1, errors.New("localrabbit: no node of the cluster is running")
	}
	return -1, errors.Join(errs...)
}

// Queues is what a running node says of every queue of vhost (name,
// type, leader, messages ready, unacknowledged and in all, which for a
// quorum queue counts those held for at-least-once dead-lettering, and
// the members online), for the log of a failed test: where the events it
// waited for are.
func (c *Cluster) Queues(ctx context.Context, vhost string) string {
	var errs []error
	for _, i := range c.expected() {
		out, err := c.nodes[i].CtlOutput(ctx, "list_queues", "-p", vhost, "name", "type", "leader", "messages_ready", "messages_unacknowledged", "messages", "online", "--no-table-headers")
		if err == nil {
			return fmt.Sprintf("queues as node %d sees them (name, type, leader, ready, unacknowledged, all messages including those held for dead-lettering, members online):\n%s", i, out)
		}
		errs = append(errs, err)
	}
	return fmt.Sprintf("no node lists the queues: %v", errors.Join(errs...))
}

// String names the cluster's nodes and ports, for logs.
func (c *Cluster) String() string {
	var b strings.Builder
	for i, n := range c.nodes {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%d: %s on port %d", i, n.Name, n.Port)
	}
	return b.String()
}
