package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	goredis "github.com/redis/go-redis/v9"

	"github.com/warrenmq/warren/internal/testenv/localrabbit"
)

// The services this harness breaks are its own: a RabbitMQ node, a
// PostgreSQL cluster and a Redis server started from the machine's
// binaries, on free ports, in the run's directory. The shared instances
// other tests use are never addressed: the node name, the ports, the data
// directories and (for RabbitMQ) the Erlang cookie are all private, so even
// a wrong node name in a rabbitmqctl call cannot authenticate to the shared
// broker.

// freePort asks the kernel for a port nobody listens on.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// childAttr puts a service in its own process group, so that stopping it
// reaches its children too (rabbitmq-server is a shell script around
// beam.smp), and has the kernel kill it if the harness dies.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// killGroup kills a child's whole process group.
func killGroup(cmd *exec.Cmd, sig syscall.Signal) {
	if cmd == nil || cmd.Process == nil {
		return
	}
	syscall.Kill(-cmd.Process.Pid, sig)
}

// tail returns the last n bytes of a file, for error messages.
func tail(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return ""
	}
	off := max(st.Size()-n, 0)
	buf := make([]byte, st.Size()-off)
	f.ReadAt(buf, off)
	return strings.TrimSpace(string(buf))
}

// waitExit returns a channel closed when cmd has exited.
func waitExit(cmd *exec.Cmd) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		close(done)
	}()
	return done
}

// poll calls cond every interval until it succeeds, exited closes, or the
// timeout passes.
func poll(ctx context.Context, timeout, interval time.Duration, exited <-chan struct{}, cond func(context.Context) error) error {
	deadline := time.Now().Add(timeout)
	for {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := cond(cctx)
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %v: %w", timeout, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-exited:
			return fmt.Errorf("exited during start-up (last check: %w)", err)
		case <-time.After(interval):
		}
	}
}

// ---------------------------------------------------------------- RabbitMQ

// rabbit is a private RabbitMQ node (see package localrabbit).
type rabbit struct {
	*localrabbit.Node
	node string
}

func startRabbit(ctx context.Context, dir string) (*rabbit, error) {
	n, err := localrabbit.Start(ctx, dir, "rel")
	if err != nil {
		return nil, err
	}
	return &rabbit{Node: n, node: n.Name}, nil
}

// ctl runs rabbitmqctl against this node, and only this node.
func (r *rabbit) ctl(ctx context.Context, args ...string) error { return r.Ctl(ctx, args...) }

// ---------------------------------------------------------------- Postgres

// postgres is a private PostgreSQL cluster.
type postgres struct {
	dir, data string
	port      int
	server    string
	settings  []string // -c name=value, beyond the harness's own
	cred      *syscall.Credential
	logPath   string
	Startup   time.Duration
	stopOnce  sync.Once

	// The postmaster, replaced by a restart.
	mu     sync.Mutex
	cmd    *exec.Cmd
	exited <-chan struct{}
}

// postgresBin finds the newest server binaries.
func postgresBin(name string) (string, error) {
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/" + name)
	slices.SortFunc(matches, func(a, b string) int {
		va, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(a))))
		vb, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(b))))
		return vb - va
	})
	if len(matches) > 0 {
		return matches[0], nil
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%s not found (scripts/services.sh installs PostgreSQL): %w", name, err)
	}
	return p, nil
}

// asPostgresUser runs the server as the postgres user when the harness is
// root: initdb and postgres refuse to run as root.
func asPostgresUser(dirs ...string) (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root needs a postgres user to run the server as: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	for _, d := range dirs {
		if err := os.Chown(d, uid, gid); err != nil {
			return nil, err
		}
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// startPostgres makes a cluster with initdb and starts it with the given
// server settings ("name=value") added to the harness's own.
func startPostgres(ctx context.Context, dir string, settings []string) (*postgres, error) {
	initdb, err := postgresBin("initdb")
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	p := &postgres{dir: dir, data: filepath.Join(dir, "data"), port: port, server: filepath.Join(filepath.Dir(initdb), "postgres"),
		settings: settings, logPath: filepath.Join(dir, "postgres.log")}
	if p.cred, err = asPostgresUser(dir); err != nil {
		return nil, err
	}
	start := time.Now()
	cmd := exec.CommandContext(ctx, initdb, "-D", p.data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync", "--no-instructions")
	cmd.Dir, cmd.Env = dir, cleanEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: p.cred, Pdeathsig: syscall.SIGKILL}
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("initdb: %w: %s", err, out)
	}
	if err := p.start(ctx); err != nil {
		p.Stop()
		return nil, err
	}
	p.Startup = time.Since(start)
	return p, nil
}

// start runs the postmaster on the cluster's port and waits until it
// accepts connections.
func (p *postgres) start(ctx context.Context) error {
	logFile, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close()
	if p.cred != nil {
		os.Chown(p.logPath, int(p.cred.Uid), int(p.cred.Gid))
	}
	// fsync is off: this harness never crashes the machine, only
	// backends, and stops the postmaster only with a shutdown checkpoint
	// (Restart), so durability across an OS crash is not under test, and
	// the 2-core machine is shared.
	args := []string{"-D", p.data, "-p", strconv.Itoa(p.port), "-k", p.dir,
		"-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "max_connections=200"}
	for _, s := range p.settings {
		args = append(args, "-c", s)
	}
	cmd := exec.Command(p.server, args...)
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = p.dir, cleanEnv(), logFile, logFile
	cmd.SysProcAttr = childAttr()
	cmd.SysProcAttr.Credential = p.cred
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start postgres: %w", err)
	}
	exited := waitExit(cmd)
	p.mu.Lock()
	p.cmd, p.exited = cmd, exited
	p.mu.Unlock()
	err = poll(ctx, time.Minute, 100*time.Millisecond, exited, func(ctx context.Context) error {
		conn, err := pgx.Connect(ctx, p.URL())
		if err != nil {
			return err
		}
		return conn.Close(ctx)
	})
	if err != nil {
		return fmt.Errorf("private PostgreSQL on port %d: %w\n%s", p.port, err, tail(p.logPath, 2000))
	}
	return nil
}

// postmaster returns the running postmaster and its exit channel.
func (p *postgres) postmaster() (*exec.Cmd, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd, p.exited
}

// URL is the cluster's connection string.
func (p *postgres) URL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", p.port)
}

// Stop shuts the cluster down fast (SIGINT), and kills it if it hangs.
func (p *postgres) Stop() {
	p.stopOnce.Do(func() {
		cmd, exited := p.postmaster()
		if cmd == nil || cmd.Process == nil {
			return
		}
		signalGroup(cmd, syscall.SIGCONT) // a paused cluster cannot shut down
		cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			killGroup(cmd, syscall.SIGKILL)
			<-exited
		}
	})
}

// Restart is "pg_ctl restart -m fast" on the harness's own postmaster: a
// fast shutdown (SIGINT, which is what pg_ctl's fast mode sends: every
// session is ended, open transactions roll back, the walsenders send
// what they have and a shutdown checkpoint is written), then the same
// server on the same port and data directory. pg_ctl itself is not used
// because it would start a daemonized postmaster the harness no longer
// owns: outside its process group (the stall fault), without the kill on
// the harness's death. It returns how long the cluster refused
// connections.
func (p *postgres) Restart(ctx context.Context) (time.Duration, error) {
	cmd, exited := p.postmaster()
	if cmd == nil || cmd.Process == nil {
		return 0, fmt.Errorf("postgres is not running")
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		return 0, fmt.Errorf("fast shutdown: %w", err)
	}
	down := time.Now()
	select {
	case <-exited:
	case <-time.After(time.Minute):
		killGroup(cmd, syscall.SIGKILL)
		<-exited
		return 0, fmt.Errorf("fast shutdown did not finish within a minute; killed\n%s", tail(p.logPath, 2000))
	}
	err := p.start(ctx)
	return time.Since(down), err
}

// Pause stops the whole cluster with SIGSTOP (the postmaster and every
// backend and helper in its process group): connections stay open and
// nothing answers, as on a server stuck on storage. Resume continues it.
func (p *postgres) Pause() error {
	cmd, _ := p.postmaster()
	return signalGroup(cmd, syscall.SIGSTOP)
}

// Resume continues a paused cluster.
func (p *postgres) Resume() error {
	cmd, _ := p.postmaster()
	return signalGroup(cmd, syscall.SIGCONT)
}

// signalGroup sends sig to a service's process group.
func signalGroup(cmd *exec.Cmd, sig syscall.Signal) error {
	if cmd == nil || cmd.Process == nil {
		return fmt.Errorf("not running")
	}
	if err := syscall.Kill(-cmd.Process.Pid, sig); err != nil {
		return fmt.Errorf("signal %v to process group %d: %w", sig, cmd.Process.Pid, err)
	}
	return nil
}

// ---------------------------------------------------------------- Redis

// redisServer is a private Redis without persistence, which can be
// crashed and restarted on the same port.
type redisServer struct {
	dir     string
	port    int
	bin     string
	logPath string
	Startup time.Duration

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited <-chan struct{}
}

func startRedis(ctx context.Context, dir string) (*redisServer, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redis-server not found (scripts/services.sh installs it): %w", err)
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	r := &redisServer{dir: dir, port: port, bin: bin, logPath: filepath.Join(dir, "redis.log")}
	start := time.Now()
	if err := r.start(ctx); err != nil {
		return nil, err
	}
	r.Startup = time.Since(start)
	return r, nil
}

func (r *redisServer) start(ctx context.Context) error {
	logFile, err := os.OpenFile(r.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close()
	cmd := exec.Command(r.bin, "--port", strconv.Itoa(r.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--dir", r.dir)
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr, cmd.SysProcAttr = r.dir, cleanEnv(), logFile, logFile, childAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	exited := waitExit(cmd)
	r.mu.Lock()
	r.cmd, r.exited = cmd, exited
	r.mu.Unlock()
	client := goredis.NewClient(&goredis.Options{Addr: r.addr(), MaxRetries: -1})
	defer client.Close()
	err = poll(ctx, 30*time.Second, 20*time.Millisecond, exited, func(ctx context.Context) error {
		return client.Ping(ctx).Err()
	})
	if err != nil {
		return fmt.Errorf("private Redis on port %d: %w\n%s", r.port, err, tail(r.logPath, 2000))
	}
	return nil
}

func (r *redisServer) addr() string { return fmt.Sprintf("127.0.0.1:%d", r.port) }

// URL is the server's URL.
func (r *redisServer) URL() string { return "redis://" + r.addr() + "/0" }

// Crash kills the server (it keeps nothing: no RDB, no AOF).
func (r *redisServer) Crash() {
	r.mu.Lock()
	cmd, exited := r.cmd, r.exited
	r.mu.Unlock()
	if cmd == nil {
		return
	}
	killGroup(cmd, syscall.SIGKILL)
	<-exited
}

// Restart starts the server again on the same port.
func (r *redisServer) Restart(ctx context.Context) error { return r.start(ctx) }

// Pause stops the server with SIGSTOP: connections stay open and nothing
// answers. Resume continues it.
func (r *redisServer) Pause() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return signalGroup(r.cmd, syscall.SIGSTOP)
}

// Resume continues a paused server.
func (r *redisServer) Resume() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return signalGroup(r.cmd, syscall.SIGCONT)
}

// Stop kills the server for good.
func (r *redisServer) Stop() { r.Crash() }

// cleanEnv is the harness's environment without the variables that would
// point a child at the shared services.
func cleanEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(name, "RABBITMQ_"), strings.HasPrefix(name, "ERL_"), strings.HasPrefix(name, "PG"),
			strings.HasPrefix(name, "WARREN_"), strings.HasPrefix(name, "WEBHOOK_"),
			name == "AMQP_URL", name == "DATABASE_URL", name == "REDIS_URL", name == "HEALTH_ADDR", name == "HOME":
			continue
		}
		out = append(out, kv)
	}
	return out
}
