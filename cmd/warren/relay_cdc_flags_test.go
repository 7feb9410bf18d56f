package main

import (
	"context"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/warrenmq/warren/cloudevents"
	"github.com/warrenmq/warren/relay"
	"github.com/warrenmq/warren/relay/cdc"
)

// A flag whose default differs between the two modes reaches each mode's
// relay as typed, and takes that mode's own default when not typed:
// "--max-attempts 20", the polling relay's default, used to reach the CDC
// relay as its default 5.
func TestRelayRunFlagsKeepTheirValueInEitherMode(t *testing.T) {
	t.Parallel()
	env := &cliEnv{stdout: io.Discard, stderr: io.Discard, getenv: func(k string) string {
		return map[string]string{"DATABASE_URL": "postgres://127.0.0.1:1/none"}[k]
	}}
	parse := func(args string) *relayRun {
		t.Helper()
		p, err := relayVerbs.parse(env, strings.Fields("run "+args))
		if err != nil {
			t.Fatal(err)
		}
		return &relayRun{env: env, opts: p.opts, fs: p.fs}
	}
	for _, c := range []struct {
		args                   string
		maxAttempts, batchSize int
	}{
		{"--mode cdc", cdc.DefaultMaxAttempts, cdc.DefaultBatchSize},
		{"--mode cdc --max-attempts 20 --batch-size 500", 20, 500},
		{"--mode cdc --max-attempts 7 --batch-size 50", 7, 50},
	} {
		cfg, err := parse(c.args).cdcConfig()
		if err != nil || cfg.MaxAttempts != c.maxAttempts || cfg.BatchSize != c.batchSize {
			t.Errorf("%s: MaxAttempts %d, BatchSize %d, %v; want %d, %d", c.args, cfg.MaxAttempts, cfg.BatchSize, err, c.maxAttempts, c.batchSize)
		}
	}
	for _, c := range []struct {
		args        string
		maxAttempts int
	}{
		{"", relay.DefaultMaxAttempts},
		{"--max-attempts 5", 5},
	} {
		cfg, err := parse(c.args).opts.config(env)
		if err != nil || cfg.MaxAttempts != c.maxAttempts {
			t.Errorf("%q: MaxAttempts %d, %v; want %d", c.args, cfg.MaxAttempts, err, c.maxAttempts)
		}
	}
	// The polling relay's flags are refused by the stream when typed,
	// even with their default value. (Bounded: a relay that starts
	// instead waits for its database until the context ends.)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if code := run(ctx, env, strings.Fields("relay run --mode cdc --workers 2")); code != 2 {
		t.Errorf("--mode cdc --workers 2: exit %d, want 2 (usage)", code)
	}
}

// Every setting both relays have reaches the CDC relay from the flags
// that set it for the polling relay, by name and type, without a list
// of fields to keep in step.
func TestShareSettingsCopiesEverySharedSetting(t *testing.T) {
	t.Parallel()
	src := relay.Config{DatabaseURL: "postgres://db/app", AMQPURL: "amqp://mq/", Exchange: "app.events", Table: "orders_outbox",
		Name: "relay-1", Format: "plane", PublishTimeout: 3 * time.Second, RetryMin: time.Second, RetryMax: time.Minute,
		BatchSize: 999, MaxAttempts: 999, Workers: 4}
	dst := cdc.Config{BatchSize: 50, MaxAttempts: 7}
	copied := shareSettings(&dst, src)
	for _, want := range []string{"DatabaseURL", "AMQPURL", "Exchange", "Table", "Name", "Format", "Publisher", "PublishTimeout", "RetryMin", "RetryMax", "Logger", "Observer"} {
		if !slices.Contains(copied, want) {
			t.Errorf("%s not copied (copied %v)", want, copied)
		}
	}
	if dst.Exchange != src.Exchange || dst.Format != src.Format || dst.PublishTimeout != src.PublishTimeout || dst.RetryMax != src.RetryMax {
		t.Errorf("copied values differ: %+v", dst)
	}
	if dst.BatchSize != 50 || dst.MaxAttempts != 7 {
		t.Errorf("BatchSize %d, MaxAttempts %d: a setting the flags already set for this mode was overwritten", dst.BatchSize, dst.MaxAttempts)
	}
}

// --hold-back-queue, repeated or comma-separated, with --high-water and
// --low-water, reaches the polling relay as its HoldBack; without it the
// relay holds nothing back.
func TestRelayRunHoldBackFlags(t *testing.T) {
	t.Parallel()
	env := &cliEnv{stdout: io.Discard, stderr: io.Discard, getenv: func(k string) string {
		return map[string]string{"DATABASE_URL": "postgres://127.0.0.1:1/none"}[k]
	}}
	config := func(args string) relay.Config {
		t.Helper()
		p, err := relayVerbs.parse(env, strings.Fields("run "+args))
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := p.opts.config(env)
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	if cfg := config(""); cfg.HoldBack != nil {
		t.Errorf("no --hold-back-queue: HoldBack %+v, want none", *cfg.HoldBack)
	}
	cfg := config("--hold-back-queue a,b --hold-back-queue c --high-water 500 --low-water 100")
	if h := cfg.HoldBack; h == nil || !slices.Equal(h.Queues, []string{"a", "b", "c"}) || h.HighWater != 500 || h.LowWater != 100 {
		t.Errorf("HoldBack %+v, want queues a, b, c, high water 500, low water 100", h)
	}
}

// --cloudevents and --cloudevents-source reach both relays as their
// CloudEvents encoder; a mode that is neither binary nor structured, or a
// source without --cloudevents, is a wrong command line; and a relay
// without a source is refused before it starts, naming the flag's field.
func TestRelayRunCloudEventsFlags(t *testing.T) {
	t.Parallel()
	env := &cliEnv{stdout: io.Discard, stderr: io.Discard, getenv: func(k string) string {
		return map[string]string{"DATABASE_URL": "postgres://127.0.0.1:1/none"}[k]
	}}
	config := func(args string) (relay.Config, error) {
		t.Helper()
		p, err := relayVerbs.parse(env, strings.Fields("run "+args))
		if err != nil {
			t.Fatal(err)
		}
		return p.opts.config(env)
	}
	if cfg, err := config(""); err != nil || cfg.CloudEvents != nil {
		t.Errorf("no --cloudevents: %+v, %v; want no CloudEvents", cfg.CloudEvents, err)
	}
	cfg, err := config("--cloudevents structured --cloudevents-source /orders")
	if err != nil || cfg.CloudEvents == nil || cfg.CloudEvents.Mode != cloudevents.Structured || cfg.CloudEvents.Source != "/orders" {
		t.Fatalf("--cloudevents structured --cloudevents-source /orders: %+v, %v", cfg.CloudEvents, err)
	}
	var c cdc.Config
	shareSettings(&c, cfg)
	if c.CloudEvents != cfg.CloudEvents {
		t.Errorf("the CDC relay's CloudEvents %+v, want the polling relay's", c.CloudEvents)
	}
	for _, args := range []string{"--cloudevents json", "--cloudevents-source /orders"} {
		if _, err := config(args); err == nil || !strings.Contains(err.Error(), "cloudevents") {
			t.Errorf("%s: %v, want a usage error naming the flag", args, err)
		}
	}
	cfg, err = config("--cloudevents binary")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := relay.New(cfg); err == nil || !strings.Contains(err.Error(), "CloudEvents") {
		t.Errorf("a relay with --cloudevents and no source: %v, want refused naming CloudEvents", err)
	}
}
