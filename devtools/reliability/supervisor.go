package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// restartDelay is how long the supervisor waits before starting a process
// that exited, like systemd's RestartSec.
const restartDelay = 300 * time.Millisecond

// procSpec describes one service process.
type procSpec struct {
	name   string // unique: relay-a, webhook-b, …
	kind   string // relay, webhook, automation
	bin    string
	args   []string
	env    []string
	health string // base URL of /healthz and /readyz
}

// errStopping: the supervisor is stopping and starts nothing more.
var errStopping = errors.New("stopping")

// exitRecord is one exit of a process.
type exitRecord struct {
	at       time.Time
	err      string
	expected bool // the harness killed or stopped it
}

// consumerStats is the stats object the consumers' health endpoints serve.
type consumerStats struct {
	Received, Done, Skipped, Duplicates, Retried, Deferred, DeadLettered, Requeued, PublishFailures, Reconnects uint64
}

func (s *consumerStats) UnmarshalJSON(b []byte) error {
	var raw struct {
		Received        uint64 `json:"received"`
		Done            uint64 `json:"done"`
		Skipped         uint64 `json:"skipped"`
		Duplicates      uint64 `json:"duplicates"`
		Retried         uint64 `json:"retried"`
		Deferred        uint64 `json:"deferred"`
		DeadLettered    uint64 `json:"dead_lettered"`
		Requeued        uint64 `json:"requeued"`
		PublishFailures uint64 `json:"publish_failures"`
		Reconnects      uint64 `json:"reconnects"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	*s = consumerStats(raw)
	return nil
}

func (s *consumerStats) add(o consumerStats) {
	s.Received += o.Received
	s.Done += o.Done
	s.Skipped += o.Skipped
	s.Duplicates += o.Duplicates
	s.Retried += o.Retried
	s.Deferred += o.Deferred
	s.DeadLettered += o.DeadLettered
	s.Requeued += o.Requeued
	s.PublishFailures += o.PublishFailures
	s.Reconnects += o.Reconnects
}

// proc is one supervised process: started, and restarted whenever it
// exits until the harness stops it.
type proc struct {
	spec    procSpec
	logPath string

	mu         sync.Mutex
	cmd        *exec.Cmd
	exited     chan struct{} // closed when the current incarnation exits
	starts     int
	exits      []exitRecord
	expectExit bool // the next exit is the harness's doing
	paused     bool
	stopping   bool
	// down, while not nil, keeps the supervisor from restarting the
	// process after it exits (holdDown); up closes it.
	down       chan struct{}
	lastStats  consumerStats // of the current incarnation
	statsTotal consumerStats // of the incarnations that exited
	startedAt  time.Time

	launched bool          // run was called
	done     chan struct{} // closed when the supervisor loop has returned
}

func newProc(spec procSpec, logPath string) *proc {
	return &proc{spec: spec, logPath: logPath, done: make(chan struct{})}
}

// run starts the process and restarts it after every exit until ctx ends
// or stop is called. It returns when the last incarnation has exited.
func (p *proc) run(ctx context.Context) {
	p.mu.Lock()
	p.launched = true
	p.mu.Unlock()
	defer close(p.done)
	for {
		if err := p.startOnce(); errors.Is(err, errStopping) {
			return
		} else if err != nil {
			p.mu.Lock()
			p.exits = append(p.exits, exitRecord{at: time.Now(), err: "start: " + err.Error()})
			p.mu.Unlock()
		} else {
			p.mu.Lock()
			exited := p.exited
			p.mu.Unlock()
			<-exited
		}
		p.mu.Lock()
		stopping, down := p.stopping, p.down
		p.mu.Unlock()
		if stopping || ctx.Err() != nil {
			return
		}
		if down != nil {
			select {
			case <-ctx.Done():
				return
			case <-down:
			}
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(restartDelay):
		}
	}
}

func (p *proc) startOnce() error {
	logFile, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	// The lock is held through Start, so stop either sees this
	// incarnation or keeps it from starting.
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopping {
		logFile.Close()
		return errStopping
	}
	p.starts++
	fmt.Fprintf(logFile, "\n=== reliability: start #%d of %s at %s\n", p.starts, p.spec.name, time.Now().UTC().Format(time.RFC3339Nano))
	cmd := exec.Command(p.spec.bin, p.spec.args...)
	cmd.Env, cmd.Stdout, cmd.Stderr = p.spec.env, logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return err
	}
	exited := make(chan struct{})
	p.cmd, p.exited, p.startedAt, p.lastStats = cmd, exited, time.Now(), consumerStats{}
	go func() {
		err := cmd.Wait()
		logFile.Close()
		p.mu.Lock()
		rec := exitRecord{at: time.Now(), expected: p.expectExit || p.stopping}
		if err != nil {
			rec.err = err.Error()
		}
		p.exits = append(p.exits, rec)
		p.expectExit, p.paused = false, false
		p.statsTotal.add(p.lastStats)
		p.lastStats = consumerStats{}
		p.mu.Unlock()
		close(exited)
	}()
	return nil
}

// signal sends sig to the current incarnation. For SIGKILL the exit is
// recorded as the harness's doing.
func (p *proc) signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return fmt.Errorf("%s is not running", p.spec.name)
	}
	select {
	case <-p.exited:
		return fmt.Errorf("%s is not running", p.spec.name)
	default:
	}
	switch sig {
	case syscall.SIGKILL, syscall.SIGTERM:
		p.expectExit = true
	case syscall.SIGSTOP:
		p.paused = true
	case syscall.SIGCONT:
		p.paused = false
	}
	return p.cmd.Process.Signal(sig)
}

// kill kills the process with SIGKILL and returns when it has exited.
func (p *proc) kill() error {
	p.mu.Lock()
	exited := p.exited
	p.mu.Unlock()
	if err := p.signal(syscall.SIGKILL); err != nil {
		return err
	}
	<-exited
	return nil
}

// term stops the current incarnation with SIGTERM, as a deploy or a
// node drain does, and kills it with SIGKILL if it is still running after
// limit. The supervisor restarts it either way. It returns how long the
// process took to exit, whether it needed SIGKILL, and its exit error.
func (p *proc) term(limit time.Duration) (took time.Duration, killed bool, exitErr string, err error) {
	p.mu.Lock()
	exited := p.exited
	p.mu.Unlock()
	start := time.Now()
	if err := p.signal(syscall.SIGTERM); err != nil {
		return 0, false, "", err
	}
	select {
	case <-exited:
	case <-time.After(limit):
		killed = true
		p.signal(syscall.SIGKILL)
		<-exited
	}
	took = time.Since(start)
	p.mu.Lock()
	defer p.mu.Unlock()
	if !killed {
		exitErr = p.exits[len(p.exits)-1].err
	}
	return took, killed, exitErr, nil
}

// holdDown stops the process with SIGTERM, as an operator stopping a
// service does (SIGKILL after limit), and keeps it stopped until up.
func (p *proc) holdDown(limit time.Duration) stopRecord {
	p.mu.Lock()
	if p.down == nil {
		p.down = make(chan struct{})
	}
	p.mu.Unlock()
	took, killed, exitErr, err := p.term(limit)
	return stopRecord{proc: p.spec.name, took: took, limit: limit, killed: killed, exitErr: exitErr, err: errText(err)}
}

// up lets the supervisor start the process again after holdDown.
func (p *proc) up() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.down != nil {
		close(p.down)
		p.down = nil
	}
}

// stop ends supervision: SIGTERM, then SIGKILL after grace. It reports
// whether the process exited cleanly on SIGTERM.
func (p *proc) stop(grace time.Duration) (clean bool, detail string) {
	p.mu.Lock()
	p.stopping = true
	if p.down != nil { // held down: the supervisor wakes and returns
		close(p.down)
		p.down = nil
	}
	exited := p.exited
	cmd := p.cmd
	paused := p.paused
	launched := p.launched
	p.mu.Unlock()
	if !launched {
		return true, ""
	}
	if cmd == nil {
		<-p.done
		return false, "never started"
	}
	if paused {
		p.signal(syscall.SIGCONT)
	}
	if err := p.signal(syscall.SIGTERM); err != nil {
		// Between an exit and its restart: nothing runs, nothing will.
		<-p.done
		return true, ""
	}
	select {
	case <-exited:
	case <-time.After(grace):
		p.signal(syscall.SIGKILL)
		<-exited
		<-p.done
		return false, fmt.Sprintf("still running %v after SIGTERM; killed", grace)
	}
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	last := p.exits[len(p.exits)-1]
	if last.err != "" {
		return false, "exit after SIGTERM: " + last.err
	}
	return true, ""
}

// ready reports whether the process answers /readyz with 200, and records
// the stats it reports.
func (p *proc) ready(ctx context.Context) bool {
	ok, _ := p.readiness(ctx)
	return ok
}

// readiness asks /readyz and says whether the process is ready, and whether
// it is up but held back by a broker that blocks its connection (not
// ready by design: only lifting the alarm helps). It records the stats a
// consumer reports.
func (p *proc) readiness(ctx context.Context) (ready, blocked bool) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.spec.health+"/readyz", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false, false
	}
	defer resp.Body.Close()
	var h struct {
		Stats         consumerStats `json:"stats"`
		Blocked       bool          `json:"blocked"`        // a consumer's
		BrokerBlocked bool          `json:"broker_blocked"` // a relay's
	}
	if json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&h) == nil && p.spec.kind != "relay" {
		p.mu.Lock()
		p.lastStats = h.Stats
		p.mu.Unlock()
	}
	return resp.StatusCode == http.StatusOK, h.Blocked || h.BrokerBlocked
}

// waitReady polls /readyz until it answers 200.
func (p *proc) waitReady(ctx context.Context, timeout time.Duration) error {
	return p.waitUntil(ctx, timeout, "ready", func(ready, _ bool) bool { return ready })
}

// waitUp polls /readyz until the process is ready or reports that the
// broker blocks it: up and connected, as far as an alarm lets it be.
func (p *proc) waitUp(ctx context.Context, timeout time.Duration) error {
	return p.waitUntil(ctx, timeout, "up (ready, or reporting the broker's block)", func(ready, blocked bool) bool { return ready || blocked })
}

func (p *proc) waitUntil(ctx context.Context, timeout time.Duration, what string, cond func(ready, blocked bool) bool) error {
	deadline := time.Now().Add(timeout)
	for !cond(p.readiness(ctx)) {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not %s after %v; log tail:\n%s", p.spec.name, what, timeout, tail(p.logPath, 1500))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

// unexpectedExits are exits the harness did not cause.
func (p *proc) unexpectedExits() []exitRecord {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []exitRecord
	for _, e := range p.exits {
		if !e.expected {
			out = append(out, e)
		}
	}
	return out
}

// stats sums the stats every incarnation reported.
func (p *proc) stats() consumerStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.statsTotal
	s.add(p.lastStats)
	return s
}
