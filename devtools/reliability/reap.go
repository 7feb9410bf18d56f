package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// A harness killed with SIGKILL cannot stop what it started. The kernel
// kills its direct children (Pdeathsig), but not rabbitmq-server's
// beam.smp, a grandchild. So each run records its pid in its directory,
// and the next run reaps the processes of directories whose harness is
// gone: only processes whose command line names that directory.

const pidFile = "harness.pid"

// claimDir records this harness as the owner of dir.
func claimDir(dir string) error {
	return os.WriteFile(filepath.Join(dir, pidFile), []byte(strconv.Itoa(os.Getpid())), 0o644)
}

// reapOrphans kills the leftovers of earlier runs whose harness died, and
// removes their directories. It returns how many directories it reaped.
func reapOrphans() int {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "warren-reliability-*", pidFile))
	reaped := 0
	for _, pf := range dirs {
		dir := filepath.Dir(pf)
		b, err := os.ReadFile(pf)
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 0 || syscall.Kill(pid, 0) == nil {
			continue // still running (or unreadable): not ours to touch
		}
		procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
		for _, c := range procs {
			cmdline, err := os.ReadFile(c)
			if err != nil || !bytes.Contains(cmdline, []byte(dir+"/")) {
				continue
			}
			if p, err := strconv.Atoi(filepath.Base(filepath.Dir(c))); err == nil && p != os.Getpid() {
				syscall.Kill(p, syscall.SIGKILL)
			}
		}
		os.RemoveAll(dir)
		reaped++
	}
	return reaped
}
