//go:build slow

package localrabbit_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/warrenmq/warren/internal/amqpx"
	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/internal/testenv/localrabbit"
)

// scripts/cluster.sh does what the README says, end to end, on its own
// directory, ports and node names: up starts and joins three nodes, up
// again changes nothing, status and urls describe them, down removes
// everything.
func TestClusterScript(t *testing.T) {
	testenv.RequireServices(t, "a private three-node RabbitMQ cluster")
	if _, err := localrabbit.BinDir(); err != nil {
		t.Fatalf("%v\n(%s installs rabbitmq-server)", err, localrabbit.StartCommand)
	}
	script, err := filepath.Abs("../../../scripts/cluster.sh")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "cluster")
	base := freePortBase(t)
	env := append(os.Environ(),
		"WARREN_CLUSTER_DIR="+dir,
		fmt.Sprintf("WARREN_CLUSTER_PORT_BASE=%d", base),
		fmt.Sprintf("WARREN_CLUSTER_NAME=scripttest%d", os.Getpid()),
	)
	run := func(arg string) (string, error) {
		t.Helper()
		// Bounded: the script's own waits end within minutes.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, script, arg)
		cmd.Env = env
		begin := time.Now()
		out, err := cmd.CombinedOutput()
		t.Logf("cluster.sh %s (%v):\n%s", arg, time.Since(begin).Round(time.Millisecond), out)
		return string(out), err
	}
	must := func(arg string) string {
		t.Helper()
		out, err := run(arg)
		if err != nil {
			t.Fatalf("cluster.sh %s: %v (node logs under %s)", arg, err, dir)
		}
		return out
	}
	t.Cleanup(func() {
		if _, err := run("down"); err != nil {
			t.Errorf("cluster.sh down: %v", err)
		}
	})

	if out := must("up"); strings.Count(out, "starting warren_") != 3 {
		t.Fatalf("up started %d nodes, want 3", strings.Count(out, "starting warren_"))
	}
	if out := must("up"); strings.Contains(out, "starting") || !strings.Contains(out, "nothing to do") {
		t.Fatal("up on a running cluster did something, or did not say it had nothing to do")
	}
	if out := must("status"); strings.Count(out, "\trunning\n") != 3 || !strings.Contains(out, "3 of 3 nodes running") {
		t.Fatal("status does not show three running nodes in one cluster")
	}

	urls := strings.Split(strings.TrimSpace(must("urls")), ",")
	if len(urls) != 3 {
		t.Fatalf("urls printed %d URLs, want 3", len(urls))
	}
	for i, url := range urls {
		if want := fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", base+1+i); url != want {
			t.Fatalf("URL %d is %s, want %s", i, url, want)
		}
		conn, err := amqpx.Dial(context.Background(), url, amqpx.DialOptions{Name: t.Name()})
		if err != nil {
			t.Fatalf("dial %s: %v", url, err)
		}
		ch, err := conn.Channel()
		if err == nil {
			// Only the consistent-hash plugin knows this exchange type.
			err = ch.ExchangeDeclare(fmt.Sprintf("scripttest.hash.%d", i), "x-consistent-hash", false, true, false, false, nil)
		}
		amqpx.CloseConnection(conn, 5*time.Second)
		if err != nil {
			t.Fatalf("declare a consistent-hash exchange through %s: %v", url, err)
		}
	}

	must("down")
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("down left %s behind (stat: %v)", dir, err)
	}
	for i := 1; i <= 3; i++ {
		for _, p := range []int{base + i, base + i + 20000} {
			if c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", p)); err == nil {
				c.Close()
				t.Fatalf("port %d still answers after down", p)
			}
		}
	}
}

// freePortBase picks a base for cluster.sh whose AMQP ports base+1..3 and
// distribution ports base+20001..20003 nobody listens on.
func freePortBase(t *testing.T) int {
	t.Helper()
	for range 100 {
		// AMQP ports from 10001 and distribution ports 20000 above them,
		// all below the kernel's ephemeral range (32768 on Linux), where
		// an outgoing connection could take one before the node binds it
		// (node 3's AMQP port once was).
		base := 10000 + rand.IntN(2700)
		free := true
		for i := 1; i <= 3 && free; i++ {
			for _, p := range []int{base + i, base + i + 20000} {
				ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
				if err != nil {
					free = false
					break
				}
				ln.Close()
			}
		}
		if free {
			return base
		}
	}
	t.Fatal("no free port base for cluster.sh")
	return 0
}
