package engine_test

import (
	"strings"
	"testing"
	"time"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/relay/internal/engine"
)

// The checks both relays share: each problem is named, and the caller's
// Durations map is left as it was given.
func TestSharedProblems(t *testing.T) {
	valid := engine.Shared{HasDatabase: true, Table: "warren_outbox", AMQPURL: "amqp://guest:guest@127.0.0.1:5672/",
		Exchange: "warren.events", Format: warren.FormatWarren, MaxMessageBytes: 1 << 20,
		RetryMin: time.Second, RetryMax: time.Minute, Durations: map[string]time.Duration{"PublishTimeout": 10 * time.Second}}
	if p := valid.Problems(); len(p) != 0 {
		t.Fatalf("a valid config has problems: %v", p)
	}
	bad := valid
	bad.HasDatabase, bad.Table, bad.AMQPURL = false, "Bad-Name", "http://x"
	bad.RetryMin, bad.RetryMax = 0, -time.Second
	got := strings.Join(bad.Problems(), "\n")
	for _, want := range []string{"one of Pool and DatabaseURL", "Table:", "AMQPURL:", "RetryMax (-1s) must not be below RetryMin (0s)", "RetryMin must be at least 1ms"} {
		if !strings.Contains(got, want) {
			t.Errorf("problems do not say %q:\n%s", want, got)
		}
	}
	if len(valid.Durations) != 1 {
		t.Errorf("Problems changed the caller's Durations: %v", valid.Durations)
	}
}
