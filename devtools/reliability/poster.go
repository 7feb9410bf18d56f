package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
)

// Every webhook replica posts to the same URL: the webhook's dedup keys
// include the endpoint, so replicas with different URLs would not share
// done-marks. The receiver tells replicas apart by the process that owns
// the client end of each TCP connection, looked up once per connection in
// /proc.

type posterKey struct{}

// posterOf returns the name of the process (among pids) that owns the
// local TCP socket bound to port, or "unknown".
func posterOf(port int, pids map[int]string) string {
	inode := socketInode(port)
	if inode == "" {
		return "unknown"
	}
	want := "socket:[" + inode + "]"
	for pid, name := range pids {
		fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		for _, fd := range fds {
			if link, err := os.Readlink(filepath.Join(fmt.Sprintf("/proc/%d/fd", pid), fd.Name())); err == nil && link == want {
				return name
			}
		}
	}
	return "unknown"
}

// socketInode finds the inode of the TCP socket whose local port is port.
func socketInode(port int) string {
	hexPort := fmt.Sprintf(":%04X", port)
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(table)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) > 9 && strings.HasSuffix(fields[1], hexPort) {
				f.Close()
				return fields[9]
			}
		}
		f.Close()
	}
	return ""
}

// connContext is the receiver server's ConnContext: it names the
// connection's poster.
func (h *harness) connContext(ctx context.Context, c net.Conn) context.Context {
	addr, ok := c.RemoteAddr().(*net.TCPAddr)
	if !ok {
		return ctx
	}
	pids := map[int]string{}
	for _, p := range h.procs {
		if p.spec.kind != "webhook" {
			continue
		}
		p.mu.Lock()
		if p.cmd != nil && p.cmd.Process != nil {
			pids[p.cmd.Process.Pid] = p.spec.name
		}
		p.mu.Unlock()
	}
	return context.WithValue(ctx, posterKey{}, posterOf(addr.Port, pids))
}

func posterFrom(ctx context.Context) string {
	if s, ok := ctx.Value(posterKey{}).(string); ok {
		return s
	}
	return "unknown"
}
