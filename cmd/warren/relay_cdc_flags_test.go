package main

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

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
