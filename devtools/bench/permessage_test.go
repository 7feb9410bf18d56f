package main

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"syscall"
	"testing"
	"time"
)

// perMessageClock measures one drain of b.N messages: allocs/op and B/op
// (the testing package's, from the timer's start to its stop) and
// cpu-µs/msg, this process's CPU time (user and system) over the same
// span, per message.
//
// For profiles of the drain alone, not of the backlog's making: the
// goroutines the drain starts carry the pprof label bench=drain (go tool
// pprof -tagfocus bench=drain), and with -memprofile the allocations made
// before the drain are written beside it as a base (go tool pprof -base
// FILE.base FILE). PROFILES.md has the commands.
type perMessageClock struct {
	b   *testing.B
	cpu time.Duration
}

// startPerMessage starts b's timer, which the caller has stopped while it
// made the backlog.
func startPerMessage(b *testing.B) *perMessageClock {
	b.ReportAllocs()
	if err := writeAllocsBase(); err != nil {
		b.Fatal(err)
	}
	pprof.SetGoroutineLabels(pprof.WithLabels(context.Background(), pprof.Labels("bench", "drain")))
	c := &perMessageClock{b: b, cpu: cpuTime()}
	b.StartTimer()
	return c
}

func (c *perMessageClock) stop() {
	c.b.StopTimer()
	c.b.ReportMetric(float64((cpuTime()-c.cpu).Microseconds())/float64(c.b.N), "cpu-µs/msg")
	pprof.SetGoroutineLabels(context.Background())
}

// writeAllocsBase writes, when go test was given -memprofile FILE, the
// allocations made so far to FILE.base. The allocation profile counts
// from the start of the process, so go tool pprof -base FILE.base FILE
// leaves what the last drain made (and its consumer's or relay's
// shutdown, after the timer). Run one benchmark at a time with it: each
// drain rewrites the base.
func writeAllocsBase() error {
	path := allocsBasePath()
	if path == "" {
		return nil
	}
	// The profile holds the allocations as of the last collection.
	runtime.GC()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// allocsBasePath is -memprofile's file with ".base", in the directory go
// test writes its profiles to, or "" without -memprofile.
func allocsBasePath() string {
	mem := flag.Lookup("test.memprofile")
	if mem == nil || mem.Value.String() == "" {
		return ""
	}
	path := mem.Value.String() + ".base"
	if dir := flag.Lookup("test.outputdir"); !filepath.IsAbs(path) && dir != nil && dir.Value.String() != "" {
		path = filepath.Join(dir.Value.String(), path)
	}
	return path
}

// cpuTime is the CPU time this process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// With -memprofile FILE relative to go test's output directory, the base
// is a profile (gzipped protocol buffers) at FILE.base in that directory.
func TestAllocsBase(t *testing.T) {
	if allocsBasePath() != "" {
		t.Skip("run with -memprofile: the test would change where its profile goes")
	}
	dir := t.TempDir()
	setFlag(t, "test.memprofile", "drain.mem")
	setFlag(t, "test.outputdir", dir)
	if err := writeAllocsBase(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "drain.mem.base"))
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
		t.Errorf("the base is not a gzipped profile: % x…", b[:min(len(b), 8)])
	}
}

// setFlag sets one of the testing package's flags for the rest of the test.
func setFlag(t *testing.T, name, value string) {
	f := flag.Lookup(name)
	if f == nil {
		t.Fatalf("no flag %s", name)
	}
	old := f.Value.String()
	if err := flag.Set(name, value); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { flag.Set(name, old) })
}
