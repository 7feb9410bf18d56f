package warrenprom_test

import (
	"context"
	"net/url"
	"runtime"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/warrenmq/warren/consumer"
	"github.com/warrenmq/warren/internal/amqpx"
	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/warrenprom"
)

// The poller's stop cannot wait on a broker that stopped reading its
// connection (while the broker's heartbeats keep it open): before, Run's
// connection close waited for a close-ok that never came.
func TestQueueDepthsStopWhileTheBrokerStopsReading(t *testing.T) {
	brokerURL := testenv.AMQPURL(t)
	u, _ := url.Parse(brokerURL)
	proxy := testenv.StartAMQPProxy(t, u.Host)
	name := testenv.Name(t, "depths")
	top := consumer.TopologyFor(consumer.Config{Name: name})
	ch := testenv.Channel(t)
	if _, err := ch.QueueDeclare(top.Queue, false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	testenv.CleanupQueues(t, top.Queue)

	reg := prometheus.NewRegistry()
	depths, err := warrenprom.NewQueueDepths(reg, warrenprom.QueueDepthOptions{
		URL: proxy.URL(t, brokerURL), Interval: 50 * time.Millisecond, Name: name, Logger: testLogger(t),
	}, top)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- depths.Run(ctx) }()
	testenv.WaitFor(t, 60*time.Second, "a first depth", func() bool {
		n, err := testutil.GatherAndCount(reg, "warren_queue_messages")
		return err == nil && n > 0
	})

	proxy.StopReading(true)
	cancel()
	limit := 2*amqpx.CloseTimeout + 30*time.Second
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(limit):
		buf := make([]byte, 1<<20)
		t.Logf("goroutines:\n%s", buf[:runtime.Stack(buf, true)])
		proxy.StopReading(false) // let the hung Run end before the test's cleanup
		t.Fatalf("QueueDepths.Run did not return within %v of its stop while the broker was not reading", limit)
	}
}
