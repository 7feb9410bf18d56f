package redis

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/warrenmq/warren/dedup"
	"github.com/warrenmq/warren/dedup/deduptest"
	"github.com/warrenmq/warren/internal/testenv"
)

// startCluster starts a private Redis Cluster of three masters, which
// share the 16384 slots, and returns their addresses. The servers are
// stopped when t ends.
func startCluster(t *testing.T) []string {
	t.Helper()
	testenv.RequireServices(t, "a private Redis cluster")
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server not found (scripts/services.sh installs it): %v", err)
	}
	ctx := context.Background()
	const nodes = 3
	addrs := make([]string, nodes)
	for i := range nodes {
		port := freeClusterPort(t)
		addrs[i] = "127.0.0.1:" + strconv.Itoa(port)
		cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--save", "", "--appendonly", "no", "--daemonize", "no", "--dir", t.TempDir())
		if err := cmd.Start(); err != nil {
			t.Fatalf("start redis-server: %v", err)
		}
		t.Cleanup(func() {
			cmd.Process.Kill()
			cmd.Wait()
		})
	}
	admins := make([]*goredis.Client, nodes)
	for i, addr := range addrs {
		admins[i] = goredis.NewClient(&goredis.Options{Addr: addr})
		t.Cleanup(func() { admins[i].Close() })
		testenv.WaitFor(t, 60*time.Second, "the cluster node "+addr+" to start", func() bool {
			return admins[i].Ping(ctx).Err() == nil
		})
		lo, hi := i*16384/nodes, (i+1)*16384/nodes-1
		if err := admins[i].ClusterAddSlotsRange(ctx, lo, hi).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for _, addr := range addrs[1:] {
		host, port, _ := net.SplitHostPort(addr)
		if err := admins[0].ClusterMeet(ctx, host, port).Err(); err != nil {
			t.Fatal(err)
		}
	}
	testenv.WaitFor(t, 60*time.Second, "the cluster to form", func() bool {
		for _, a := range admins {
			info, err := a.ClusterInfo(ctx).Result()
			if err != nil || !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, fmt.Sprintf("cluster_known_nodes:%d", nodes)) {
				return false
			}
		}
		return true
	})
	return addrs
}

// clusterClient returns a client of the cluster at addrs, closed when t
// ends.
func clusterClient(t *testing.T, addrs []string) *goredis.ClusterClient {
	t.Helper()
	client := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { client.Close() })
	return client
}

// The store on Redis Cluster, batched: every call names one key, in a hash
// tag, and a pipeline spans slots and nodes.
func TestCluster(t *testing.T) {
	// Serial: its lease and retention subtests need the store to answer
	// within deduptest's 300 ms shortLease and shortRetention.
	addrs := startCluster(t)
	t.Run("PipelineAcrossSlots", func(t *testing.T) { testClusterPipelineAcrossSlots(t, clusterClient(t, addrs)) })
	t.Run("Conformance", func(t *testing.T) {
		client := clusterClient(t, addrs)
		deduptest.Run(t, func(t *testing.T, retention time.Duration) dedup.Store {
			s, err := New(client, Config{Prefix: testenv.Name(t, "dd") + ":", Retention: retention})
			if err != nil {
				t.Fatal(err)
			}
			return s
		})
	})
}

// freeClusterPort is a free port whose cluster bus port (+10000) is free
// too.
func freeClusterPort(t *testing.T) int {
	t.Helper()
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if port+10000 > 65535 {
			continue
		}
		bus, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port+10000))
		if err != nil {
			continue
		}
		bus.Close()
		return port
	}
	t.Fatal("no free port pair for a cluster node")
	return 0
}

// On Redis Cluster a batch is one pipeline of scripts whose keys live in
// many slots on several nodes; go-redis sends each script to the node of
// its key's hash tag, and each call gets its own answer. Scripts that a
// node has not cached (every node starts empty) are sent again as EVAL on
// that node.
func testClusterPipelineAcrossSlots(t *testing.T, client *goredis.ClusterClient) {
	ctx := context.Background()
	rec := &pipelineRecorder{hold: make(chan struct{}), held: make(chan struct{})}
	client.AddHook(rec)
	s, err := New(client, Config{Batching: dedup.Batching{MaxBatchesInFlight: 1}})
	if err != nil {
		t.Fatal(err)
	}
	const n = 24
	slots := map[int64]bool{}
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("evt-%d", i)
		slot, err := client.ClusterKeySlot(ctx, s.redisKey(keys[i])).Result()
		if err != nil {
			t.Fatal(err)
		}
		slots[slot] = true
	}
	claims := make([]dedup.Claim, n)
	for i, r := range claimTogether(t, s, rec, keys) {
		if r.err != nil || r.claim.Result != dedup.Acquired {
			t.Fatalf("claim of evt-%d in a pipeline across slots = %+v, %v; want acquired", i, r.claim, r.err)
		}
		claims[i] = r.claim
	}
	// The first claim went alone (its EVALSHA answered NOSCRIPT, then
	// EVAL); the queued ones went out together.
	if p := rec.recorded(); len(p) < 3 || len(p[2]) != n || p[2][0] != "evalsha" {
		t.Errorf("pipelines %v; want the %d queued claims together in the third", p, n)
	}
	if len(slots) < 2 {
		t.Fatalf("the keys fell in %d slot; the test proved nothing", len(slots))
	}
	// Completions, again across slots, and the keys are done on their
	// nodes.
	errs := make(chan error, n)
	for _, c := range claims {
		go func() { errs <- s.Complete(ctx, c) }()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	for i := range n {
		if c, err := s.Claim(ctx, fmt.Sprintf("evt-%d", i), time.Minute); err != nil || c.Result != dedup.Done {
			t.Errorf("claim of completed evt-%d = %+v, %v; want done", i, c, err)
		}
	}
}
