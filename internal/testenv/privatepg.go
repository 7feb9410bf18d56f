package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// PrivatePostgres starts a PostgreSQL cluster of the test's own (see
// [NewPrivatePostgres]) and returns the URL of its postgres database.
func PrivatePostgres(t testing.TB, settings ...string) string {
	t.Helper()
	return NewPrivatePostgres(t, settings...).URL
}

// PrivateServer is a PostgreSQL cluster of one test's own, which the test
// may stop and start again.
type PrivateServer struct {
	// URL is the server's postgres database.
	URL string

	t      testing.TB
	binary string
	args   []string
	attr   *syscall.SysProcAttr
	log    string
	server *exec.Cmd
	exited chan struct{}
}

// NewPrivatePostgres starts a PostgreSQL cluster of the test's own, with
// the server settings given ("wal_level=logical"), for what the shared one
// cannot be made to do without disturbing other tests; it is stopped and
// deleted when t ends. A machine without PostgreSQL's server binaries
// fails t: scripts/services.sh installs them.
func NewPrivatePostgres(t testing.TB, settings ...string) *PrivateServer {
	t.Helper()
	RequireServices(t, "a private PostgreSQL")
	initdb := serverBinary(t, "initdb")
	// Not t.TempDir: the server runs as postgres when the test runs as
	// root, and must be able to reach its directory.
	dir, err := os.MkdirTemp("", "warren-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	attr := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if os.Geteuid() == 0 { // initdb and postgres refuse to run as root
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("no private PostgreSQL: running as root needs the postgres user that Debian's PostgreSQL package makes (scripts/services.sh installs it): %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
		attr.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	data := filepath.Join(dir, "data")
	cmd := exec.Command(initdb, "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
	cmd.SysProcAttr = attr
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v: %s", err, out)
	}
	ports, err := UnusedPorts(1)
	if err != nil {
		t.Fatal(err)
	}
	port := ports[0]
	args := []string{"-D", data, "-p", strconv.Itoa(port), "-k", dir, "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"}
	for _, s := range settings {
		args = append(args, "-c", s)
	}
	p := &PrivateServer{
		URL:    fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port),
		t:      t,
		binary: filepath.Join(filepath.Dir(initdb), "postgres"),
		args:   args,
		attr:   attr,
		log:    filepath.Join(dir, "postgres.log"),
	}
	t.Cleanup(func() { // a fast shutdown, then a kill; the log of a failed test's server shown
		if t.Failed() {
			log, _ := os.ReadFile(p.log)
			t.Logf("private PostgreSQL's log, last 4000 bytes:\n%s", log[max(0, len(log)-4000):])
		}
		if p.Stop(15*time.Second) != nil {
			syscall.Kill(-p.server.Process.Pid, syscall.SIGKILL)
			<-p.exited
		}
	})
	p.Start()
	return p
}

// Start starts the stopped server and waits until it accepts connections.
func (p *PrivateServer) Start() {
	t := p.t
	t.Helper()
	logFile, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	server := exec.Command(p.binary, p.args...)
	server.Stdout, server.Stderr, server.SysProcAttr = logFile, logFile, p.attr
	if err := server.Start(); err != nil {
		t.Fatalf("start postgres: %v", err)
	}
	exited := make(chan struct{})
	go func() { server.Wait(); close(exited) }()
	p.server, p.exited = server, exited
	WaitFor(t, time.Minute, "the private PostgreSQL accepting connections", func() bool {
		select {
		case <-exited:
			log, _ := os.ReadFile(p.log)
			t.Fatalf("private PostgreSQL exited: %s", log)
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, p.URL)
		if err == nil {
			conn.Close(ctx)
		}
		return err == nil
	})
}

// Stop asks the server for a fast shutdown (what pg_ctl stop does by
// default) and waits up to within for it to exit; it returns an error
// if the server is still running then. A stopped server's Stop does
// nothing.
func (p *PrivateServer) Stop(within time.Duration) error {
	return p.signal(syscall.SIGINT, "a fast shutdown", within)
}

// Crash stops the server as a crash would: an immediate shutdown, after
// which the next Start runs crash recovery (it empties unlogged tables,
// and loses commits whose WAL was not yet flushed). It waits up to
// within for the exit.
func (p *PrivateServer) Crash(within time.Duration) error {
	return p.signal(syscall.SIGQUIT, "an immediate shutdown", within)
}

func (p *PrivateServer) signal(sig syscall.Signal, what string, within time.Duration) error {
	select {
	case <-p.exited:
		return nil
	default:
	}
	p.server.Process.Signal(sig)
	select {
	case <-p.exited:
		return nil
	case <-time.After(within):
		return fmt.Errorf("the private PostgreSQL did not exit within %v of %s", within, what)
	}
}

// serverBinary finds one of PostgreSQL's server programs: Debian keeps them
// off PATH, under /usr/lib/postgresql/<version>/bin, and the newest is taken.
func serverBinary(t testing.TB, name string) string {
	t.Helper()
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/" + name)
	slices.SortFunc(matches, func(a, b string) int {
		return versionOf(b) - versionOf(a)
	})
	if len(matches) > 0 {
		return matches[0]
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	t.Fatalf("no private PostgreSQL: %s not found under /usr/lib/postgresql or on PATH; scripts/services.sh installs it", name)
	return ""
}

// versionOf reads the version directory of a /usr/lib/postgresql/<version>/bin path.
func versionOf(path string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(path))))
	return v
}
