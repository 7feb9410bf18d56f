package relay_test

import (
	"testing"
	"time"

	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/relay"
)

// The broker stops reading the relay's connection (as RabbitMQ does to a
// publisher during a memory or disk alarm) while its heartbeats keep
// flowing, so no read deadline fires. Run still returns within a bound of
// being stopped, and the rows whose publish got no confirm stay in the
// table, not delivered.
// Serial: its verdict is a time bound (Run returns within PublishTimeout + 5 s, 12 s of slack).
func TestStopWhileTheBrokerStopsReading(t *testing.T) {
	e := newEnv(t)
	e.bindQueue()
	got := consume(t, e.queue)
	brokerURL := testenv.AMQPURL(t)
	p := testenv.StartAMQPProxy(t, hostOf(t, brokerURL))
	var connected counter
	cfg := e.config(testenv.Name(t, "relay"))
	cfg.AMQPURL, cfg.MaxAttempts = p.URL(t, brokerURL), 1000
	run := e.start(cfg, func(r *relay.Relay) { relay.SetConnectedHook(r, connected.hook()) })
	connected.waitAbove(t, 0, "the relay to connect")
	before := e.publishN("before", 20)
	got.waitDistinct(t, len(before), 20*time.Second)

	p.StopReading(true)
	during := e.publishN("during", 20)
	testenv.WaitFor(t, 20*time.Second, "the relay to claim the new rows", func() bool {
		return e.count("event_id LIKE 'during-%' AND attempts >= 1") > 0
	})
	stopsInTime(t, run, cfg, p, "while the broker was not reading")
	if n := e.count("event_id LIKE 'during-%' AND state = 'pending'"); n != len(during) {
		t.Errorf("%d of %d rows the broker never read are pending", n, len(during))
	}
}

// stopsInTime stops run and fails the test unless Run returns within the
// bound relay/doc.go gives a stop whatever the broker does: PublishTimeout
// plus 5s for the broker to answer the close, with slack for a busy
// machine (a stop of 30s fails). Past it, p drops the connection, so that
// the relay can stop at all.
func stopsInTime(t *testing.T, run *running, cfg relay.Config, p *testenv.Proxy, while string) {
	t.Helper()
	bound := cfg.PublishTimeout + 5*time.Second + 12*time.Second
	begin := time.Now()
	stopped := make(chan error, 1)
	go func() { stopped <- run.stop() }()
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(bound):
		p.SetUp(false)
		t.Fatalf("the relay did not stop within %v %s", bound, while)
	}
	t.Logf("stopped in %v", time.Since(begin).Round(time.Millisecond))
}
