package console

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/warrenmq/warren/dlqtool"
	"github.com/warrenmq/warren/internal/testenv"
)

// While one operation holds a queue, another one on it waits only as long
// as its context lasts: a page opened during a long replay gives up with
// its request instead of holding a goroutine until the replay ends.
func TestWithQueueWaitEndsWithTheContext(t *testing.T) {
	t.Parallel()
	_, _, top := testenv.NewDeadLetterTopology(t)
	b := &broker{url: testenv.AMQPURL(t)}
	defer b.close()

	holding, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- b.withQueue(context.Background(), top.Consumer, func(*dlqtool.Queue) error {
			close(holding)
			<-release
			return nil
		})
	}()
	<-holding

	// The deadline must end the wait for the lock, not the Open before
	// it (a round trip to a local broker): the error must say the queue
	// was busy.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	waited := make(chan error, 1)
	go func() {
		waited <- b.withQueue(ctx, top.Consumer, func(*dlqtool.Queue) error {
			t.Error("ran while another operation held the queue")
			return nil
		})
	}()
	select {
	case err := <-waited:
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "another action") {
			t.Fatalf("waiting operation: %v, want the queue busy and context.DeadlineExceeded", err)
		}
	case <-time.After(time.Minute): // a bound on a failing test, not a timing assertion
		t.Fatal("the waiting operation did not give up when its context ended")
	}

	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// The lock is free again.
	if err := b.withQueue(context.Background(), top.Consumer, func(*dlqtool.Queue) error { return nil }); err != nil {
		t.Fatal(err)
	}
}
