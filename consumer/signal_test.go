package consumer_test

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/consumer"
	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/internal/testenv/localrabbit"
)

// TestMain lets the test binary double as a small consumer service, so a
// test can start it as a real process and send it a real SIGTERM.
func TestMain(m *testing.M) {
	if os.Getenv("WARREN_TEST_SERVICE") == "1" {
		os.Exit(runTestService())
	}
	if os.Getenv("WARREN_PARTITION_REPLICA") != "" {
		os.Exit(runPartitionReplica())
	}
	os.Exit(localrabbit.RunTests(m))
}

// runTestService consumes with a handler that takes HANDLER_TIME, printing
// "ready", "started <id>", then "finished <id>" or "cancelled <id>".
func runTestService() int {
	handlerTime, _ := time.ParseDuration(os.Getenv("HANDLER_TIME"))
	grace, _ := time.ParseDuration(os.Getenv("GRACE"))
	c, err := consumer.New(consumer.Config{
		URL:           os.Getenv("AMQP_URL"),
		Name:          os.Getenv("WARREN_QUEUE"),
		Exchange:      os.Getenv("WARREN_EXCHANGE"),
		ShutdownGrace: grace,
		Logger:        slog.New(slog.NewTextHandler(os.Stderr, nil)),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	c.HandleFunc("", func(ctx context.Context, m *warren.Message) error {
		fmt.Println("started", m.Event.ID)
		select {
		case <-time.After(handlerTime):
			fmt.Println("finished", m.Event.ID)
			return nil
		case <-ctx.Done():
			fmt.Println("cancelled", m.Event.ID)
			return ctx.Err()
		}
	})
	return runChild(c)
}

func TestSIGTERMDrainsInFlightHandlers(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name         string
		handlerTime  time.Duration
		grace        time.Duration
		wantLine     string
		wantRequeued int
	}{
		{"handler finishes within grace", 300 * time.Millisecond, 10 * time.Second, "finished ev", 0},
		{"grace shorter than handler", time.Minute, 200 * time.Millisecond, "cancelled ev", 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			queue, exchange := testenv.Name(t, "c"), testenv.Name(t, "ex")
			c := newConsumer(t, func(cfg *consumer.Config) { cfg.Name, cfg.Exchange = queue, exchange })

			cmd := exec.Command(os.Args[0])
			cmd.Env = append(os.Environ(), "WARREN_TEST_SERVICE=1", "AMQP_URL="+testenv.AMQPURL(t),
				"WARREN_QUEUE="+queue, "WARREN_EXCHANGE="+exchange,
				"HANDLER_TIME="+tc.handlerTime.String(), "GRACE="+tc.grace.String())
			cmd.Stderr = t.Output()
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cmd.Process.Kill() })
			lines := make(chan string, 16)
			go func() {
				sc := bufio.NewScanner(stdout)
				for sc.Scan() {
					lines <- sc.Text()
				}
				close(lines)
			}()
			expect := func(want string) {
				t.Helper()
				select {
				case line := <-lines:
					if line != want {
						t.Fatalf("service said %q, want %q", line, want)
					}
				case <-time.After(60 * time.Second):
					t.Fatalf("service did not say %q", want)
				}
			}
			expect("ready")
			newPublisher(t).events(exchange, "", event("ev", "workitem.updated"))
			expect("started ev")
			if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			expect(tc.wantLine)
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			select {
			case err := <-exited:
				if err != nil {
					t.Fatalf("service exited with %v, want status 0", err)
				}
			case <-time.After(60 * time.Second):
				t.Fatal("service did not exit after SIGTERM")
			}
			for line := range lines {
				if strings.HasPrefix(line, "started") {
					t.Errorf("service started another handler after SIGTERM: %q", line)
				}
			}
			ch := testenv.Channel(t)
			if depth := testenv.QueueDepth(t, ch, c.Topology().Queue); depth != tc.wantRequeued {
				t.Errorf("queue holds %d messages after exit, want %d", depth, tc.wantRequeued)
			}
			if depth := testenv.QueueDepth(t, ch, c.Topology().DLQ); depth != 0 {
				t.Errorf("DLQ holds %d messages", depth)
			}
		})
	}
}
