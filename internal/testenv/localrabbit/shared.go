package localrabbit

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/internal/amqpx"
	"github.com/warrenmq/warren/internal/testenv"
)

// lane is one private node of this test binary, started by the first test
// that asks for it.
type lane struct {
	once   sync.Once
	holder string // the test that uses the node now, "" when none does
	dir    string
	node   *Node
	err    error
}

// lanes are the binary's private nodes, by lane name ("" for Shared's).
var lanes struct {
	mu     sync.Mutex
	byName map[string]*lane
}

// Shared returns this test binary's private node, starting it on first
// use (on a busy machine that takes 10–30 s). A node that cannot start
// fails t, saying what installs RabbitMQ.
//
// Every test of the binary shares the node, and the tests that use it
// alarm or reconfigure it, so no two may run at once: one test of a
// binary may call t.Parallel, and several run one after another in the
// package's lane ([RunLane]). A second test that asks for the node while
// another holds it fails, naming both. Call StopShared from TestMain once
// the tests have run; if the binary dies first, the kernel kills the node
// anyway.
func Shared(t testing.TB) *Node { return SharedLane(t, "") }

// SharedLane is [Shared] for a second lane of the binary's tests, named
// name: a node of its own, so that tests that only change their own users
// run beside the ones that alarm the first node, which would block them.
// Its tests run one after another too.
func SharedLane(t testing.TB, name string) *Node {
	t.Helper()
	testenv.RequireServices(t, "a private RabbitMQ node")
	lanes.mu.Lock()
	if lanes.byName == nil {
		lanes.byName = map[string]*lane{}
	}
	l := lanes.byName[name]
	if l == nil {
		l = &lane{}
		lanes.byName[name] = l
	}
	holder := l.holder
	if holder == "" {
		l.holder = t.Name()
		t.Cleanup(func() {
			lanes.mu.Lock()
			l.holder = ""
			lanes.mu.Unlock()
		})
	}
	lanes.mu.Unlock()
	if holder != "" && holder != t.Name() && !strings.HasPrefix(t.Name(), holder+"/") {
		t.Fatalf("%s and %s use the binary's shared private node at once: run the tests that alarm or reconfigure it one after another, in the package's lane (localrabbit.RunLane)", holder, t.Name())
	}
	l.once.Do(func() {
		removeOrphans()
		dir, err := os.MkdirTemp("", dirPattern)
		if err != nil {
			l.err = err
			return
		}
		l.dir = dir
		if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
			l.err = err
			return
		}
		t.Logf("starting a private RabbitMQ node in %s", dir)
		l.node, l.err = Start(context.Background(), dir, "test"+name)
		if l.err == nil {
			t.Logf("private RabbitMQ node %s on port %d started in %v", l.node.Name, l.node.Port, l.node.Startup)
		}
	})
	if l.err != nil {
		t.Fatalf("cannot start a private RabbitMQ node: %v\n(%s installs rabbitmq-server)", l.err, StartCommand)
	}
	return l.node
}

// RunTests runs m's tests and then StopShared, and returns m's exit code:
// a package's TestMain, when its tests use Shared or SharedLane, is
// os.Exit(localrabbit.RunTests(m)), so that the nodes shut down cleanly
// and leave no directory behind.
func RunTests(m *testing.M) int {
	code := m.Run()
	StopShared()
	return code
}

// StopShared stops the nodes Shared and SharedLane started, if any, and
// deletes their directories.
func StopShared() {
	lanes.mu.Lock()
	defer lanes.mu.Unlock()
	for _, l := range lanes.byName {
		if l.node != nil {
			l.node.Stop()
		}
		if l.dir != "" {
			os.RemoveAll(l.dir)
		}
	}
}

const (
	dirPattern = "warren-localrabbit-"
	ownerFile  = "owner.pid"
)

// removeOrphans deletes the directories of shared nodes whose test binary
// died before StopShared (the kernel killed the node itself).
func removeOrphans() {
	owners, _ := filepath.Glob(filepath.Join(os.TempDir(), dirPattern+"*", ownerFile))
	for _, f := range owners {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if pid, err := strconv.Atoi(string(b)); err == nil && pid > 0 && syscall.Kill(pid, 0) != nil {
			os.RemoveAll(filepath.Dir(f))
		}
	}
}

// Alarm raises the node's memory alarm and returns once the broker
// blocks publishers, failing t if it cannot; lift lifts the alarm and
// returns once the broker unblocks them. The alarm is lifted when t ends in
// any case, so a failing test does not leave the node blocked for the
// tests after it.
func (n *Node) Alarm(t testing.TB) (lift func()) {
	t.Helper()
	ctx := context.Background()
	// RabbitMQ blocks a connection when it publishes under an alarm, so a
	// probe that publishes says when the alarm is in effect. It publishes
	// again and again until lifted: the alarm reaches the connection a
	// moment after the watermark is set, and a publish before that
	// moment passes without blocking anything.
	probe, err := amqpx.Dial(ctx, n.URL(), amqpx.DialOptions{Name: "localrabbit alarm probe"})
	if err != nil {
		t.Fatalf("alarm probe: %v", err)
	}
	blocked := probe.NotifyBlocked(make(chan amqp.Blocking, 4))
	ch, err := probe.Channel()
	if err != nil {
		probe.Close()
		t.Fatalf("alarm probe: %v", err)
	}
	var once sync.Once
	var inEffect bool // the probe saw the alarm: lifting it must unblock the probe
	stopProbe, probeDone := make(chan struct{}), make(chan struct{})
	lift = func() {
		t.Helper()
		once.Do(func() {
			if err := n.LiftMemoryAlarm(ctx); err != nil {
				t.Errorf("lift the memory alarm: %v", err)
			} else if inEffect {
				if err := waitBlocked(blocked, false); err != nil {
					t.Errorf("lift the memory alarm: %v", err)
				}
			}
			close(stopProbe)
			// With a deadline: a probe still blocked fails its stuck send.
			amqpx.CloseConnection(probe, 5*time.Second)
			<-probeDone
		})
	}
	t.Cleanup(lift)
	if err := n.RaiseMemoryAlarm(ctx); err != nil {
		close(probeDone)
		t.Fatalf("raise the memory alarm: %v", err)
	}
	go func() {
		defer close(probeDone)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for ch.Publish("", "localrabbit.alarm.probe", false, false, amqp.Publishing{}) == nil {
			select {
			case <-stopProbe:
				return
			case <-tick.C:
			}
		}
	}()
	if err := waitBlocked(blocked, true); err != nil {
		t.Fatalf("raise the memory alarm: %v", err)
	}
	inEffect = true
	return lift
}

// waitBlocked waits up to a minute for a connection.blocked (active) or
// connection.unblocked notification.
func waitBlocked(notes <-chan amqp.Blocking, active bool) error {
	timeout := time.After(time.Minute)
	for {
		select {
		case b, ok := <-notes:
			if !ok {
				return errors.New("the probe connection closed")
			}
			if b.Active == active {
				return nil
			}
		case <-timeout:
			return fmt.Errorf("the broker did not set the probe's blocked state to %v within a minute", active)
		}
	}
}

// SetMaxMessageSize sets the node's max_message_size, which channels read
// when they open, and puts the value it found back when t ends.
func (n *Node) SetMaxMessageSize(t testing.TB, bytes int) {
	t.Helper()
	ctx := context.Background()
	was, err := n.Eval(ctx, "application:get_env(rabbit, max_message_size, 134217728).")
	if err != nil {
		t.Fatalf("read max_message_size: %v", err)
	}
	// RabbitMQ 3.x reads the application setting; 4.x reads a copy made at
	// boot (persistent_term), which set_env alone would leave as it was.
	set := func(v string) error {
		return n.evalExpect(ctx, "ok", fmt.Sprintf("application:set_env(rabbit, max_message_size, %s), persistent_term:put(max_message_size, %s).", v, v))
	}
	if err := set(strconv.Itoa(bytes)); err != nil {
		t.Fatalf("set max_message_size: %v", err)
	}
	t.Cleanup(func() {
		if err := set(was); err != nil {
			t.Errorf("restore max_message_size: %v", err)
		}
	})
}

// LaneTest is one test of a package's lane: see [RunLane].
type LaneTest struct {
	Name string
	Run  func(*testing.T)
}

// RunLane runs tests (those of a test binary that alarm or reconfigure
// its shared node) one after another, as subtests of t, while t runs in
// parallel with the binary's other tests, which must not use the node.
// A lane spends on the node only the time of its own tests, where serial
// tests would hold every other test of the package back meanwhile.
func RunLane(t *testing.T, tests []LaneTest) {
	t.Parallel()
	for _, test := range tests {
		t.Run(test.Name, test.Run)
	}
}
