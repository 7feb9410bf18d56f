package console

import (
	"context"
	"testing"
	"time"

	"github.com/warrenmq/warren/dlqtool"
)

// HoldQueue takes the console's lock on queue, as a long action would,
// until release is called (or the test ends).
func HoldQueue(t testing.TB, s *Server, queue string) (release func()) {
	t.Helper()
	holding, done := make(chan struct{}), make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		errc <- s.broker.withQueue(context.Background(), queue, func(*dlqtool.Queue) error {
			close(holding)
			<-done
			return nil
		})
	}()
	select {
	case <-holding:
	case err := <-errc:
		t.Fatalf("hold %s: %v", queue, err)
	}
	var released bool
	release = func() {
		if !released {
			released = true
			close(done)
			if err := <-errc; err != nil {
				t.Errorf("hold %s: %v", queue, err)
			}
		}
	}
	t.Cleanup(release)
	return release
}

// SetClock makes the console's sessions and login limit read the time
// from now. Call it before serving.
func SetClock(s *Server, now func() time.Time) {
	s.sessions.now = now
	s.logins.now = now
}

// ResultLists is how many fingerprints, event ids and row ids the result
// id still holds.
func ResultLists(s *Server, id string) int {
	j, ok := s.outcomes.get(id)
	if !ok {
		return -1
	}
	p := j.snapshot().Plan
	return len(p.Filter.Fingerprints) + len(p.Filter.EventIDs) + len(p.Outbox.IDs) + len(p.Outbox.EventIDs) + len(p.IDs)
}
