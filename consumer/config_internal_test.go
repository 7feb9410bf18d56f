package consumer

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	cfg := Config{Name: "webhook"}.withDefaults()
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	if cfg.Exchange != DefaultExchange || cfg.Prefetch != DefaultPrefetch || cfg.Workers != DefaultWorkers ||
		cfg.Channels != DefaultChannels || cfg.MessageTTL != time.Hour || cfg.DLQTTL != 7*24*time.Hour ||
		cfg.MaxAttempts != 5 || cfg.QueueType != Classic || len(cfg.RetryDelays) != 4 || cfg.Logger == nil {
		t.Errorf("defaults not applied: %+v", cfg)
	}
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		cfg  Config
		want string
	}{
		"no name":          {Config{}, "Name is required"},
		"reserved name":    {Config{Name: "amq.direct"}, "reserved prefix"},
		"space in name":    {Config{Name: "web hook"}, "must not contain spaces"},
		"long name":        {Config{Name: strings.Repeat("q", 201)}, "at most 200 bytes"},
		"bad queue type":   {Config{Name: "q", QueueType: "stream"}, `QueueType must be "classic" or "quorum"`},
		"tiers descending": {Config{Name: "q", RetryDelays: []time.Duration{time.Minute, time.Second}}, "strictly ascending"},
		"tiny tier":        {Config{Name: "q", RetryDelays: []time.Duration{time.Microsecond}}, "at least 1ms"},
		"negative workers": {Config{Name: "q", Workers: -1}, "Workers must not be negative"},
		"huge prefetch":    {Config{Name: "q", Prefetch: 70000}, "at most 65535"},
		"classic limit":    {Config{Name: "q", DeliveryLimit: 3}, "needs QueueType Quorum"},
		"DLQ not .dlq":     {Config{Name: "q", DeadLetterQueue: "q_dlq"}, `must end in ".dlq"`},
		"DLQ is the queue": {Config{Name: "q.dlq", DeadLetterQueue: "q.dlq"}, "must differ from the consumer's queue"},
		"DLQ reserved":     {Config{Name: "q", DeadLetterQueue: "amq.x.dlq"}, "DeadLetterQueue \"amq.x.dlq\" uses the broker's reserved prefix"},
		"DLX space":        {Config{Name: "q", DeadLetterExchange: "plane dlq"}, "DeadLetterExchange \"plane dlq\" must not contain spaces"},
		"DLX is exchange":  {Config{Name: "q", Exchange: "plane.event_stream", DeadLetterExchange: "plane.event_stream"}, "must differ from Exchange"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := New(tc.cfg)
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New = %v, want an ErrInvalidConfig saying %q", err, tc.want)
			}
		})
	}
}

// The first mistake a new user makes, a Config without a Name, is told
// alone and with its fix, not after errors about the names derived from it
// (the dead-letter queue ".dlq" must end in ".dlq").
func TestConfigWithoutANameSaysOnlyThat(t *testing.T) {
	t.Parallel()
	_, err := New(Config{})
	if !errors.Is(err, ErrInvalidConfig) || strings.Contains(err.Error(), "DeadLetter") || !strings.Contains(err.Error(), `Config{Name: "billing"}`) {
		t.Errorf("New(Config{}) = %v; want Name is required, with an example, and nothing about the names derived from it", err)
	}
}

// Plane's names are valid: its exchange, its shared dead-letter exchange
// and a queue named after its service.
func TestConfigTakesPlaneNames(t *testing.T) {
	t.Parallel()
	cfg := Config{Name: "plane.event_stream.webhook", Exchange: "plane.event_stream", DeadLetterExchange: "plane.event_stream.dlq", AdoptQueue: true}
	if _, err := New(cfg); err != nil {
		t.Fatal(err)
	}
	topo := TopologyFor(cfg)
	if topo.DLX != "plane.event_stream.dlq" || topo.DLQ != "plane.event_stream.webhook.dlq" {
		t.Errorf("topology %+v", topo)
	}
}

func TestRetryTierNamesAndChoice(t *testing.T) {
	t.Parallel()
	topo := TopologyFor(Config{Name: "hooks", RetryDelays: []time.Duration{1500 * time.Millisecond, 10 * time.Second, time.Minute, 2 * time.Hour}})
	var names []string
	for _, r := range topo.Retry {
		names = append(names, r.Queue)
	}
	if got := strings.Join(names, " "); got != "hooks.retry.1500ms hooks.retry.10s hooks.retry.1m hooks.retry.2h" {
		t.Errorf("tier names %q", got)
	}
	cases := []struct {
		attempt int
		hint    time.Duration
		want    time.Duration
	}{
		{1, 0, 1500 * time.Millisecond},
		{2, 0, 10 * time.Second},
		{9, 0, 2 * time.Hour},
		{1, 5 * time.Second, 10 * time.Second},
		{1, time.Minute, time.Minute},
		{3, time.Millisecond, 1500 * time.Millisecond},
		{1, 5 * time.Hour, 2 * time.Hour},
	}
	for _, tc := range cases {
		if got := topo.tierFor(tc.attempt, tc.hint).Delay; got != tc.want {
			t.Errorf("tierFor(%d, %v) = %v, want %v", tc.attempt, tc.hint, got, tc.want)
		}
	}
}
