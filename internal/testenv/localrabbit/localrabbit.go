package localrabbit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/warrenmq/warren/internal/amqpx"
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

	bin      string // directory of rabbitmq-server and rabbitmqctl
	env      []string
	cmd      *exec.Cmd
	exited   chan struct{}
	outPath  string
	stopOnce sync.Once
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

// Start runs a node named <kind>_<pid>@localhost (kind like "rel" or
// "test") on free ports, with dir (created if missing) as its home, and
// waits until it accepts AMQP connections, for at most two minutes or
// until ctx ends.
func Start(ctx context.Context, dir, kind string) (*Node, error) {
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	var cookie [16]byte
	rand.Read(cookie[:])
	n := &Node{
		Name:    fmt.Sprintf("%s%s_%d@localhost", namePrefix, kind, os.Getpid()),
		Port:    ports[0],
		Dir:     dir,
		bin:     bin,
		outPath: filepath.Join(dir, "rabbitmq.out"),
	}
	files := map[string]string{
		"rabbitmq.conf": fmt.Sprintf("listeners.tcp.local = 127.0.0.1:%d\nloopback_users = none\n", n.Port),
		"env.conf":      "", // instead of /etc/rabbitmq/rabbitmq-env.conf, which names the shared node
		"plugins":       "[].\n",
		// The node's own cookie: rabbitmqctl run with HOME=dir reads it,
		// and cannot authenticate to any other node.
		".erlang.cookie": strings.ToUpper(hex.EncodeToString(cookie[:])),
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			return nil, err
		}
	}
	os.Chmod(filepath.Join(dir, ".erlang.cookie"), 0o400)
	n.env = append(cleanEnv(),
		"HOME="+dir,
		// Makes rabbitmq-server exec the VM instead of running it as a
		// child of a shell: the VM is then our direct child, so
		// Pdeathsig reaches it and stopping the process stops the node.
		"RUNNING_UNDER_SYSTEMD=true",
		"RABBITMQ_NODENAME="+n.Name,
		"RABBITMQ_NODE_IP_ADDRESS=127.0.0.1",
		"RABBITMQ_NODE_PORT="+strconv.Itoa(n.Port),
		"RABBITMQ_DIST_PORT="+strconv.Itoa(ports[1]),
		"RABBITMQ_CONF_ENV_FILE="+filepath.Join(dir, "env.conf"),
		"RABBITMQ_CONFIG_FILE="+filepath.Join(dir, "rabbitmq.conf"),
		"RABBITMQ_ADVANCED_CONFIG_FILE="+filepath.Join(dir, "advanced.config"),
		"RABBITMQ_ENABLED_PLUGINS_FILE="+filepath.Join(dir, "plugins"),
		"RABBITMQ_MNESIA_BASE="+filepath.Join(dir, "mnesia"),
		"RABBITMQ_LOG_BASE="+filepath.Join(dir, "log"),
		"RABBITMQ_PID_FILE="+filepath.Join(dir, "rabbitmq.pid"),
		// The node registers with the machine's epmd (shared by every
		// node, harmless: it only maps names to ports). If none runs, the
		// node starts one on loopback, which outlives the node.
		"ERL_EPMD_ADDRESS=127.0.0.1",
	)
	out, err := os.Create(n.outPath)
	if err != nil {
		return nil, err
	}
	defer out.Close()
	start := time.Now()
	n.cmd = exec.Command(filepath.Join(bin, "rabbitmq-server"))
	n.cmd.Dir, n.cmd.Env, n.cmd.Stdout, n.cmd.Stderr = dir, n.env, out, out
	// Its own process group, so stopping it reaches the VM's helpers
	// too; killed by the kernel if we die.
	n.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := n.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start rabbitmq-server: %w", err)
	}
	n.exited = make(chan struct{})
	go func() {
		n.cmd.Wait()
		close(n.exited)
	}()
	if err := n.waitReady(ctx, 2*time.Minute); err != nil {
		n.Stop()
		return nil, fmt.Errorf("private RabbitMQ %s on port %d: %w\n%s", n.Name, n.Port, err, tail(n.outPath, 2000))
	}
	n.Startup = time.Since(start)
	return n, nil
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
		case <-n.exited:
			return fmt.Errorf("exited during start-up (last check: %w)", err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// URL is the node's AMQP URL (guest/guest, default vhost).
func (n *Node) URL() string { return fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", n.Port) }

// Exited is closed when the node's process has exited.
func (n *Node) Exited() <-chan struct{} { return n.exited }

// Ctl runs rabbitmqctl against this node, and only this node, for at most
// two minutes.
func (n *Node) Ctl(ctx context.Context, args ...string) error {
	if !strings.HasPrefix(n.Name, namePrefix) {
		panic("localrabbit: refusing rabbitmqctl against node " + n.Name)
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(n.bin, "rabbitmqctl"), append([]string{"-n", n.Name, "-q"}, args...)...)
	cmd.Dir, cmd.Env = n.Dir, n.env
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("rabbitmqctl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// RaiseMemoryAlarm sets the memory high watermark so low that the node's
// memory use is over it at once: the node raises its memory alarm and
// blocks every connection that publishes, as it does in production when
// memory runs short.
func (n *Node) RaiseMemoryAlarm(ctx context.Context) error {
	// 3.10 takes a fraction of the machine's RAM; any node uses more than
	// a millionth of it.
	return n.Ctl(ctx, "set_vm_memory_high_watermark", "0.000001")
}

// LiftMemoryAlarm puts the watermark back to RabbitMQ's default (0.4), which
// clears the alarm.
func (n *Node) LiftMemoryAlarm(ctx context.Context) error {
	return n.Ctl(ctx, "set_vm_memory_high_watermark", "0.4")
}

// Stop shuts the node down, and kills it if it does not go.
func (n *Node) Stop() {
	n.stopOnce.Do(func() {
		if n.cmd == nil || n.cmd.Process == nil {
			return
		}
		select {
		case <-n.exited:
			return
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		n.Ctl(ctx, "shutdown")
		select {
		case <-n.exited:
		case <-time.After(10 * time.Second):
			syscall.Kill(-n.cmd.Process.Pid, syscall.SIGKILL)
			<-n.exited
		}
	})
}

// freePorts asks the kernel for n distinct ports nobody listens on.
func freePorts(n int) ([]int, error) {
	var ports []int
	for len(ports) < n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		p := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		if !slices.Contains(ports, p) {
			ports = append(ports, p)
		}
	}
	return ports, nil
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
