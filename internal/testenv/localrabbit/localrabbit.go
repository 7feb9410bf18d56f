package localrabbit

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/warrenmq/warren/internal/amqpx"
	"github.com/warrenmq/warren/internal/testenv"
)

// StartCommand installs the RabbitMQ server this package runs.
const StartCommand = "scripts/services.sh"

// namePrefix starts every node name this package gives, and Ctl refuses
// any other node.
const namePrefix = "warren_"

// Node is a private RabbitMQ node.
type Node struct {
	// Name is the Erlang node name, e.g. warren_rel_1234@localhost.
	Name string
	// Port is the AMQP port on 127.0.0.1.
	Port int
	// Dir holds the node's configuration, cookie, data and logs.
	Dir string
	// Startup is how long the node took to accept connections.
	Startup time.Duration

	bin     string // directory of rabbitmq-server and rabbitmqctl
	env     []string
	outPath string

	// The running VM; start replaces them when the node starts again.
	mu       sync.Mutex
	cmd      *exec.Cmd
	exited   chan struct{}
	stopOnce *sync.Once

	// The eval session (see Eval), started by the first call; it
	// outlives a restart of the node and ends with Stop. evalLock (one
	// slot) is held by the call using it.
	evalLock    chan struct{}
	eval        *evalSession
	evalStopped bool // Stop ended it; start clears this

	watermark string // the memory watermark before RaiseMemoryAlarm, guarded by mu
}

// BinDir finds the real scripts, not Debian's /usr/sbin wrappers, which
// switch to the rabbitmq user and so to the shared node's cookie.
func BinDir() (string, error) {
	const debian = "/usr/lib/rabbitmq/bin"
	if _, err := os.Stat(filepath.Join(debian, "rabbitmq-server")); err == nil {
		return debian, nil
	}
	p, err := exec.LookPath("rabbitmq-server")
	if err != nil {
		return "", fmt.Errorf("rabbitmq-server not found (%s installs it): %w", StartCommand, err)
	}
	return filepath.Dir(p), nil
}

// Start runs a node named warren_<kind>_<pid>@localhost (kind like "rel"
// or "test") on free ports, with dir (created if missing) as its home, and
// waits until it accepts AMQP connections, for at most two minutes or
// until ctx ends.
func Start(ctx context.Context, dir, kind string) (*Node, error) {
	n, err := newNode(nodeConfig{
		name:   fmt.Sprintf("%s%s_%d@localhost", namePrefix, kind, os.Getpid()),
		dir:    dir,
		cookie: newCookie(),
	})
	if err != nil {
		return nil, err
	}
	if err := n.start(ctx); err != nil {
		return nil, err
	}
	return n, nil
}

// nodeConfig is what makes a node itself; a cluster's nodes differ only
// in name and dir, and share the cookie.
type nodeConfig struct {
	name    string
	dir     string
	cookie  string
	plugins []string // enabled at boot, e.g. rabbitmq_consistent_hash_exchange
	// seed, if set, is the node a fresh node joins when it first boots
	// (peer discovery, classic_config), retrying for up to two minutes
	// while the seed boots too.
	seed string
}

// newCookie returns a random Erlang cookie nobody else knows.
func newCookie() string {
	var b [16]byte
	rand.Read(b[:])
	return strings.ToUpper(hex.EncodeToString(b[:]))
}

// AdvancedConfig is every private node's advanced.config. A quorum
// queue's at-least-once dead-lettering (warren's quorum retry tiers, back
// to their queue) resends a message its target did not confirm only after
// dead_letter_worker_publisher_confirm_timeout, 3 minutes by default: a
// retried event whose queue's leader node died as it came back would wait
// that long. 10 s is what docs/scaling.md recommends; the setting has no
// rabbitmq.conf key in 3.10.
const AdvancedConfig = "[{rabbit, [{dead_letter_worker_publisher_confirm_timeout, 10000}]}].\n"

// newNode writes the node's files into c.dir (created if missing), picks
// its ports and builds the environment that points rabbitmq-server and
// rabbitmqctl at them and nothing else. It starts nothing.
func newNode(c nodeConfig) (*Node, error) {
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(c.dir, 0o755); err != nil {
		return nil, err
	}
	ports, err := testenv.UnusedPorts(2)
	if err != nil {
		return nil, err
	}
	n := &Node{
		evalLock: make(chan struct{}, 1),
		Name:     c.name,
		Port:     ports[0],
		Dir:      c.dir,
		bin:      bin,
		outPath:  filepath.Join(c.dir, "rabbitmq.out"),
	}
	conf := fmt.Sprintf("listeners.tcp.local = 127.0.0.1:%d\nloopback_users = none\n", n.Port)
	if c.seed != "" {
		conf += "cluster_formation.peer_discovery_backend = classic_config\n" +
			"cluster_formation.classic_config.nodes.1 = " + c.seed + "\n" +
			"cluster_formation.discovery_retry_limit = 600\n" +
			"cluster_formation.discovery_retry_interval = 200\n"
	}
	files := map[string]string{
		"rabbitmq.conf":   conf,
		"env.conf":        "", // instead of /etc/rabbitmq/rabbitmq-env.conf, which names the shared node
		"plugins":         "[" + strings.Join(c.plugins, ",") + "].\n",
		"advanced.config": AdvancedConfig,
		// The node's own cookie: rabbitmqctl run with HOME=dir reads it,
		// and cannot authenticate to any other node.
		".erlang.cookie": c.cookie,
	}
	for name, content := range files {
		path := filepath.Join(c.dir, name)
		os.Chmod(path, 0o600) // a cookie left read-only by an earlier run
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			return nil, err
		}
	}
	os.Chmod(filepath.Join(c.dir, ".erlang.cookie"), 0o400)
	n.env = append(cleanEnv(),
		"HOME="+c.dir,
		// Makes rabbitmq-server exec the VM instead of running it as a
		// child of a shell: the VM is then our direct child, so
		// Pdeathsig reaches it and stopping the process stops the node.
		"RUNNING_UNDER_SYSTEMD=true",
		"RABBITMQ_NODENAME="+n.Name,
		"RABBITMQ_NODE_IP_ADDRESS=127.0.0.1",
		"RABBITMQ_NODE_PORT="+strconv.Itoa(n.Port),
		"RABBITMQ_DIST_PORT="+strconv.Itoa(ports[1]),
		// Erlang distribution (how rabbitmqctl and the other nodes of a
		// cluster reach the node) on loopback only, like the AMQP port;
		// by default it listens on every interface, guarded by the cookie
		// alone.
		"RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=-kernel inet_dist_use_interface {127,0,0,1}",
		"RABBITMQ_CONF_ENV_FILE="+filepath.Join(c.dir, "env.conf"),
		"RABBITMQ_CONFIG_FILE="+filepath.Join(c.dir, "rabbitmq.conf"),
		"RABBITMQ_ADVANCED_CONFIG_FILE="+filepath.Join(c.dir, "advanced.config"),
		"RABBITMQ_ENABLED_PLUGINS_FILE="+filepath.Join(c.dir, "plugins"),
		"RABBITMQ_MNESIA_BASE="+filepath.Join(c.dir, "mnesia"),
		"RABBITMQ_LOG_BASE="+filepath.Join(c.dir, "log"),
		"RABBITMQ_PID_FILE="+filepath.Join(c.dir, "rabbitmq.pid"),
		// The node registers with the machine's epmd (shared by every
		// node, harmless: it only maps names to ports). If none runs, the
		// node starts one on loopback, which outlives the node.
		"ERL_EPMD_ADDRESS=127.0.0.1",
	)
	return n, nil
}

// start runs the node's VM, as it is configured, and waits until it
// accepts AMQP connections, for at most two minutes or until ctx ends.
// A node that was stopped or killed starts again the same way, with the
// same name, ports, cookie and data.
func (n *Node) start(ctx context.Context) error {
	out, err := os.OpenFile(n.outPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer out.Close()
	n.evalLock <- struct{}{}
	n.evalStopped = false
	<-n.evalLock
	begin := time.Now()
	cmd := exec.Command(filepath.Join(n.bin, "rabbitmq-server"))
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = n.Dir, n.env, out, out
	// Its own process group, so stopping it reaches the VM's helpers
	// too; killed by the kernel if we die.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start rabbitmq-server: %w", err)
	}
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		close(exited)
	}()
	n.mu.Lock()
	n.cmd, n.exited, n.stopOnce = cmd, exited, new(sync.Once)
	n.mu.Unlock()
	if err := n.waitReady(ctx, 2*time.Minute); err != nil {
		n.Stop()
		return fmt.Errorf("private RabbitMQ %s on port %d: %w\n%s", n.Name, n.Port, err, n.LogTail())
	}
	n.Startup = time.Since(begin)
	return nil
}

// waitReady dials the node until it answers, it exits, or timeout passes.
func (n *Node) waitReady(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		conn, err := amqpx.Dial(ctx, n.URL(), amqpx.DialOptions{Name: "localrabbit readiness", Timeout: time.Second})
		if err == nil {
			return conn.Close()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %v: %w", timeout, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-n.Exited():
			return fmt.Errorf("exited during start-up (last check: %w)", err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// URL is the node's AMQP URL (guest/guest, default vhost).
func (n *Node) URL() string { return fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", n.Port) }

// Exited is closed when the node's process has exited. A node started
// again has a new channel: call Exited again after a restart.
func (n *Node) Exited() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.exited
}

// LogTail is the end of what the node wrote to its standard output and
// error, where RabbitMQ logs when it runs as a service: for error
// messages.
func (n *Node) LogTail() string { return tail(n.outPath, 2000) }

// Ctl runs rabbitmqctl against this node, and only this node, for at most
// two minutes.
func (n *Node) Ctl(ctx context.Context, args ...string) error {
	_, err := n.CtlOutput(ctx, args...)
	return err
}

// CtlOutput is Ctl, returning what rabbitmqctl printed on standard output.
func (n *Node) CtlOutput(ctx context.Context, args ...string) (string, error) {
	return n.run(ctx, "rabbitmqctl", args...)
}

// run runs one of RabbitMQ's command-line tools (rabbitmqctl,
// rabbitmq-queues, ...) against this node, and only this node, for at
// most two minutes: -n names the node, and HOME in the node's environment
// holds its cookie, which no other node accepts.
func (n *Node) run(ctx context.Context, tool string, args ...string) (string, error) {
	if !strings.HasPrefix(n.Name, namePrefix) {
		panic("localrabbit: refusing " + tool + " against node " + n.Name)
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(n.bin, tool), append([]string{"-n", n.Name, "-q"}, args...)...)
	var stderr strings.Builder
	cmd.Dir, cmd.Env, cmd.Stderr = n.Dir, n.env, &stderr
	out, err := cmd.Output()
	if err != nil {
		msg := strings.TrimSpace(stderr.String() + "\n" + string(out))
		return "", fmt.Errorf("%s %s: %w: %s", tool, strings.Join(args, " "), err, msg)
	}
	return string(out), nil
}

// RaiseMemoryAlarm sets the memory high watermark so low that the node's
// memory use is over it at once: the node raises its memory alarm and
// blocks every connection that publishes, as it does in production when
// memory runs short. LiftMemoryAlarm puts the watermark it found back.
func (n *Node) RaiseMemoryAlarm(ctx context.Context) error {
	was, err := n.Eval(ctx, "vm_memory_monitor:get_vm_memory_high_watermark().")
	if err != nil {
		return err
	}
	n.mu.Lock()
	if n.watermark == "" { // raised twice: the first one found the real one
		n.watermark = was
	}
	n.mu.Unlock()
	// A fraction of the machine's RAM (what rabbitmqctl
	// set_vm_memory_high_watermark calls): any node uses more than a
	// millionth of it.
	return n.evalExpect(ctx, "ok", "vm_memory_monitor:set_vm_memory_high_watermark(0.000001).")
}

// LiftMemoryAlarm puts back the watermark RaiseMemoryAlarm found (as the
// term Erlang printed: a fraction, or {absolute, Bytes}), which clears the
// alarm; without a raise before, RabbitMQ 3.x's default, 0.4.
func (n *Node) LiftMemoryAlarm(ctx context.Context) error {
	n.mu.Lock()
	was := cmp.Or(n.watermark, "0.4")
	n.mu.Unlock()
	if err := n.evalExpect(ctx, "ok", "vm_memory_monitor:set_vm_memory_high_watermark("+was+")."); err != nil {
		return err
	}
	n.mu.Lock()
	n.watermark = ""
	n.mu.Unlock()
	return nil
}

// Stop shuts the node down, and kills it if it does not go. A node that
// has exited already (killed, or stopped before) is left as it is.
func (n *Node) Stop() {
	n.closeEval()
	n.mu.Lock()
	cmd, exited, once := n.cmd, n.exited, n.stopOnce
	n.mu.Unlock()
	if cmd == nil {
		return
	}
	once.Do(func() {
		select {
		case <-exited:
			return
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		n.Ctl(ctx, "shutdown")
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
	})
}

// Kill sends SIGKILL to the node's VM and its helpers, the way a crashed
// machine or the OOM killer ends a broker: no shutdown, no goodbye to the
// cluster. It returns once the VM has exited.
func (n *Node) Kill() {
	n.mu.Lock()
	cmd, exited := n.cmd, n.exited
	n.mu.Unlock()
	if cmd == nil {
		return
	}
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-exited
}

// tail returns the last n bytes of a file, for error messages.
func tail(path string, n int64) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b[max(int64(len(b))-n, 0):]))
}

// cleanEnv is this process's environment without the variables that
// would point the node or rabbitmqctl at the shared broker's settings.
func cleanEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(name, "RABBITMQ_"), strings.HasPrefix(name, "ERL_"),
			name == "HOME", name == "NOTIFY_SOCKET", name == "RUNNING_UNDER_SYSTEMD":
			continue
		}
		out = append(out, kv)
	}
	return out
}
