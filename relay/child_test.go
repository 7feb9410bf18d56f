package relay_test

// Test relays run as child processes of the test binary, so that a test
// can kill one with SIGKILL, which leaves it no time to release its claims.

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/warrenmq/warren/internal/testenv/localrabbit"
	"github.com/warrenmq/warren/outbox"
	"github.com/warrenmq/warren/relay"
)

// childEnv, when set, makes the test binary a relay that claims a batch
// and then hangs, to be killed with SIGKILL by TestRelayKilledAfterClaim.
const childEnv = "WARREN_RELAY_TEST_CHILD"

func TestMain(m *testing.M) {
	if spec := os.Getenv(childEnv); spec != "" {
		os.Exit(runChild(spec))
	}
	os.Exit(localrabbit.RunTests(m))
}

type childSpec struct {
	DatabaseURL, AMQPURL, Exchange, Table, Name string
	Lease                                       time.Duration
	Schema                                      outbox.Schema
	// KeepGoing makes the child say each claim and go on publishing,
	// instead of hanging after its first.
	KeepGoing bool
	BatchSize int
}

func runChild(spec string) int {
	var s childSpec
	if err := json.Unmarshal([]byte(spec), &s); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	r, err := relay.New(relay.Config{
		DatabaseURL: s.DatabaseURL, AMQPURL: s.AMQPURL, Exchange: s.Exchange, Table: s.Table, Name: s.Name,
		Lease: s.Lease, PublishTimeout: s.Lease / 2, Workers: 1, BatchSize: cmp.Or(s.BatchSize, 1000), Schema: s.Schema,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, nil)),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	relay.SetAfterClaimHook(r, func(rows []outbox.Row) {
		fmt.Printf("claimed %d\n", len(rows))
		if !s.KeepGoing {
			time.Sleep(time.Hour) // hang holding the claim until the parent kills us
		}
	})
	if err := r.Run(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// child is a relay running in a process of its own (runChild), to be
// killed with SIGKILL.
type child struct {
	t      *testing.T
	cmd    *exec.Cmd
	lines  chan string
	stderr strings.Builder
}

func startChild(t *testing.T, spec childSpec) *child {
	t.Helper()
	js, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	c := &child{t: t, cmd: exec.Command(os.Args[0], "-test.run=^$"), lines: make(chan string, 100)}
	c.cmd.Env = append(os.Environ(), childEnv+"="+string(js))
	c.cmd.Stderr = &c.stderr
	stdout, err := c.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { // ends when the child's stdout closes, at its death
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		close(c.lines)
	}()
	t.Cleanup(c.kill)
	return c
}

// next returns the child's next line of output.
func (c *child) next() string {
	c.t.Helper()
	select {
	case line, ok := <-c.lines:
		if !ok {
			c.t.Fatalf("the child relay died; its log:\n%s", c.stderr.String())
		}
		return line
	case <-time.After(60 * time.Second):
		c.kill()
		c.t.Fatalf("the child relay said nothing for 60s; its log:\n%s", c.stderr.String())
		return ""
	}
}

// kill sends SIGKILL, which leaves no time for cleanup or a release, and
// waits for the child's end.
func (c *child) kill() {
	if c.cmd.ProcessState != nil {
		return
	}
	c.cmd.Process.Kill()
	c.cmd.Wait()
	for range c.lines {
	}
}
