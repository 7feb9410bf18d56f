package main

import (
	"bytes"
	"log/slog"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/warrenmq/warren/consumer"
	"github.com/warrenmq/warren/examples/internal/serviceenv/serviceenvtest"
	"github.com/warrenmq/warren/internal/testenv"
)

// The service's consumer comes from the environment: with
// WARREN_ADOPT_QUEUE=true and a WARREN_QUEUE that does not exist, run
// stops at once with the consumer's "nothing to adopt" error naming that
// queue, which only a consumer in adopt mode on that queue returns.
func TestRunAdoptsTheQueueOfTheEnvironment(t *testing.T) {
	queue, exchange := testenv.Name(t, "q"), testenv.Name(t, "ex")
	dlq, dlx := queue+".dead.dlq", queue+".dead.dlx"
	// Created only if the environment did not reach the consumer, with
	// its names or the defaults.
	for _, cfg := range []consumer.Config{{Name: queue, DeadLetterQueue: dlq, DeadLetterExchange: dlx}, {Name: queue}} {
		topo := consumer.TopologyFor(cfg)
		testenv.CleanupQueues(t, topo.Queues()...)
		testenv.CleanupExchanges(t, topo.DLX)
	}
	testenv.CleanupExchanges(t, exchange)
	t.Setenv("AMQP_URL", testenv.AMQPURL(t))
	t.Setenv("REDIS_URL", testenv.RedisURL(t))
	t.Setenv("WARREN_QUEUE", queue)
	t.Setenv("WARREN_EXCHANGE", exchange)
	t.Setenv("WARREN_ADOPT_QUEUE", "true")
	t.Setenv("WARREN_DLQ", dlq)
	t.Setenv("WARREN_DLX", dlx)
	t.Setenv("WEBHOOK_URL", "http://127.0.0.1:1/hook")
	t.Setenv("WEBHOOK_SECRET", "s3cret")
	var log bytes.Buffer
	done := make(chan error, 1)
	go func() { done <- run(slog.New(slog.NewTextHandler(&log, nil))) }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "nothing to adopt: queue "+queue+" does not exist") {
			t.Fatalf("run = %v; want the consumer's nothing-to-adopt error for %s", err, queue)
		}
	case <-time.After(60 * time.Second):
		// Stopped the way an operator stops it (RunUntilSignal takes the
		// signal), so it cannot declare its queues again after cleanup.
		if err := syscall.Kill(os.Getpid(), syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
		<-done
		t.Fatalf("run still running after 60s: its consumer is not adopting %s", queue)
	}
}

// With HEALTH_ADDR the service serves Prometheus /metrics beside its
// probes: warren's consumer metrics and its queues' depths, which
// docs/grafana-dashboard.json charts.
func TestRunServesMetrics(t *testing.T) {
	queue := testenv.Name(t, "q")
	testenv.CleanupQueues(t, consumer.TopologyFor(consumer.Config{Name: queue}).Queues()...)
	testenv.CleanupExchanges(t, consumer.TopologyFor(consumer.Config{Name: queue}).DLX)
	addr := serviceenvtest.FreeAddr(t)
	t.Setenv("AMQP_URL", testenv.AMQPURL(t))
	t.Setenv("REDIS_URL", testenv.RedisURL(t))
	t.Setenv("WARREN_QUEUE", queue)
	t.Setenv("WEBHOOK_URL", "http://127.0.0.1:1/hook")
	t.Setenv("WEBHOOK_SECRET", "s3cret")
	t.Setenv("HEALTH_ADDR", addr)
	done := make(chan error, 1)
	go func() { done <- run(slog.New(slog.DiscardHandler)) }()
	t.Cleanup(func() { serviceenvtest.Stop(t, done) })
	// The queue depths' series exist from the start (their first poll may
	// precede the queue, and the next is 15s later).
	serviceenvtest.WaitForMetrics(t, "http://"+addr+"/metrics", done,
		`warren_consumer_connected{consumer="`+queue+`"} 1`,
		`warren_queue_poll_errors_total{consumer="`+queue+`"}`,
		`warren_dedup_claims_total{consumer="`+queue+`",result="acquired"}`,
		"go_goroutines ")
}
