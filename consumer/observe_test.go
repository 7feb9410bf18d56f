package consumer_test

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/consumer"
	"github.com/warrenmq/warren/dlq"
	"github.com/warrenmq/warren/internal/testenv"
)

// observed records what a consumer tells its Observer.
type observed struct {
	mu          sync.Mutex
	received    int
	settled     []consumer.Settlement
	connections []string
}

func (o *observed) Received(string) { o.mu.Lock(); o.received++; o.mu.Unlock() }
func (o *observed) Settled(_ string, s consumer.Settlement) {
	o.mu.Lock()
	o.settled = append(o.settled, s)
	o.mu.Unlock()
}
func (o *observed) Connected(_ string, reconnect bool) {
	event := "connected"
	if reconnect {
		event = "reconnected"
	}
	o.mu.Lock()
	o.connections = append(o.connections, event)
	o.mu.Unlock()
}
func (o *observed) Disconnected(_ string, err error) {
	event := "stopped"
	if err != nil {
		event = "lost"
	}
	o.mu.Lock()
	o.connections = append(o.connections, event)
	o.mu.Unlock()
}

func (o *observed) settlements() []consumer.Settlement {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.settled)
}

// TestObserverSeesEveryDisposition runs one message to each of done,
// retried (then done), dead-lettered as permanent and as undecodable, and
// checks the observer saw each settlement once, with its event type,
// class and handler duration, and the connection's life.
func TestObserverSeesEveryDisposition(t *testing.T) {
	t.Parallel()
	obs := &observed{}
	c := newConsumer(t, func(cfg *consumer.Config) {
		cfg.Observer = obs
		cfg.RetryDelays = []time.Duration{time.Millisecond}
	})
	var mu sync.Mutex
	tries := map[string]int{}
	c.HandleFunc("", func(_ context.Context, m *warren.Message) error {
		mu.Lock()
		tries[m.Event.ID]++
		n := tries[m.Event.ID]
		mu.Unlock()
		time.Sleep(2 * time.Millisecond) // the handler's work, which HandlerDuration must cover
		switch {
		case m.Event.Type == "flaky.once" && n == 1:
			return errBoom
		case m.Event.Type == "bad.always":
			return warren.Permanent(errors.New("refused"))
		}
		return nil
	})
	stop := start(t, c)
	p := newPublisher(t)
	p.events(c.Topology().Exchange, "", event("ok-1", "ok.done"), event("flaky-1", "flaky.once"), event("bad-1", "bad.always"))
	p.raw(c.Topology().Exchange, amqp.Publishing{ContentType: "application/json", Body: []byte(`{not json`)})
	testenv.WaitFor(t, 60*time.Second, "five settlements", func() bool { return len(obs.settlements()) == 5 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	type seen struct {
		eventType   string
		disposition consumer.Disposition
		class       dlq.Class
		ran         bool
	}
	var got []seen
	for _, s := range obs.settlements() {
		got = append(got, seen{s.EventType, s.Disposition, s.Class, s.HandlerDuration >= 2*time.Millisecond})
	}
	want := []seen{
		{"", consumer.DeadLettered, dlq.ClassUndecodable, false},
		{"bad.always", consumer.DeadLettered, dlq.ClassPermanent, true},
		{"flaky.once", consumer.Done, "", true},
		{"flaky.once", consumer.Retried, "", true},
		{"ok.done", consumer.Done, "", true},
	}
	sortSeen := func(a, b seen) int {
		return cmp.Or(cmp.Compare(a.eventType, b.eventType), cmp.Compare(a.disposition, b.disposition))
	}
	slices.SortFunc(got, sortSeen)
	slices.SortFunc(want, sortSeen)
	if !slices.Equal(got, want) {
		t.Errorf("settlements\n got %+v\nwant %+v", got, want)
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if obs.received != 5 {
		t.Errorf("Received %d times for 5 settlements", obs.received)
	}
	if !slices.Equal(obs.connections, []string{"connected", "stopped"}) {
		t.Errorf("connection events %v, want connected then stopped", obs.connections)
	}
	if s := c.Stats(); s.Done != 2 || s.Retried != 1 || s.DeadLettered != 2 {
		t.Errorf("Stats %+v disagree with the observer", s)
	}
}

// panickingObserver is an Observer whose every method panics.
type panickingObserver struct{}

func (panickingObserver) Received(string)                     { panic("observer bug: Received") }
func (panickingObserver) Settled(string, consumer.Settlement) { panic("observer bug: Settled") }
func (panickingObserver) Connected(string, bool)              { panic("observer bug: Connected") }
func (panickingObserver) Disconnected(string, error)          { panic("observer bug: Disconnected") }

// An Observer that panics costs its reports, not the process: before the
// consumer recovered it, Received's panic came before the ack, so the
// process ended, the delivery came back, and every restart panicked on
// it. Each event must be handled exactly once and acked, and the log
// must say which method panicked.
func TestObserverPanicIsRecovered(t *testing.T) {
	t.Parallel()
	logs := &testenv.LogBuffer{}
	c := newConsumer(t, func(cfg *consumer.Config) {
		cfg.Observer = panickingObserver{}
		cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	})
	var mu sync.Mutex
	handled := map[string]int{}
	c.HandleFunc("", func(_ context.Context, m *warren.Message) error {
		mu.Lock()
		defer mu.Unlock()
		handled[m.Event.ID]++
		return nil
	})
	stop := start(t, c)
	newPublisher(t).events(c.Topology().Exchange, "", event("p-1", "ok.done"), event("p-2", "ok.done"), event("p-3", "ok.done"))
	testenv.WaitFor(t, 60*time.Second, "three events acked", func() bool { return c.Stats().Done == 3 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, id := range []string{"p-1", "p-2", "p-3"} {
		if handled[id] != 1 {
			t.Errorf("%s handled %d times, want once", id, handled[id])
		}
	}
	for _, method := range []string{"Connected", "Received", "Settled", "Disconnected"} {
		if !logs.Has("method=" + method) {
			t.Errorf("the log does not say %s panicked:\n%s", method, logs)
		}
	}
}
