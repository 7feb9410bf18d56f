package consumer

import (
	"context"
	"errors"
	"maps"
	"net/url"
	"strconv"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/internal/testenv"
)

const mib = 1 << 20

func TestPlanMemoryWithoutBudgetKeepsPrefetch(t *testing.T) {
	t.Parallel()
	cfg := Config{Name: "q"}.withDefaults()
	plan, err := planMemory(cfg, brokerLimit{bytes: 128 * mib, source: limitConfigured})
	if err != nil {
		t.Fatal(err)
	}
	// 4 channels × 256 × 128 MiB + 16 workers × 1 MiB.
	if want := int64(4*256*128*mib + 16*mib); plan.prefetch != 256 || plan.worstCase != want {
		t.Errorf("plan = prefetch %d, worst case %d; want 256, %d", plan.prefetch, plan.worstCase, want)
	}
}

func TestPlanMemoryLowersPrefetchToFitTheBudget(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name         string
		budget       int64
		limit        int64
		wantPrefetch int
	}{
		// 2 channels × p × 4 MiB + 8 workers × 1 MiB ≤ 104 MiB → p = 12.
		{"exact fit", 104 * mib, 4 * mib, 12},
		{"one byte short", 104*mib - 1, 4 * mib, 11},
		{"budget above the configured prefetch", 1 << 40, 4 * mib, 100},
		// Decoding copies only what MaxBodyBytes admits and the broker sends.
		{"small limit", 8*256*1024 + 2*3*256*1024, 256 * 1024, 3},
		{"prefetch 1", 2*16*mib + 8*mib, 16 * mib, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{Name: "q", Channels: 2, Prefetch: 100, Workers: 8, MemoryBudget: tc.budget}.withDefaults()
			plan, err := planMemory(cfg, brokerLimit{bytes: tc.limit, source: limitProbed})
			if err != nil {
				t.Fatal(err)
			}
			if plan.prefetch != tc.wantPrefetch {
				t.Errorf("prefetch %d, want %d", plan.prefetch, tc.wantPrefetch)
			}
			if plan.worstCase > tc.budget {
				t.Errorf("worst case %d over the budget %d", plan.worstCase, tc.budget)
			}
		})
	}
}

func TestPlanMemoryRefusesABudgetBelowPrefetchOne(t *testing.T) {
	t.Parallel()
	cfg := Config{Name: "q", Channels: 4, Workers: 2, MemoryBudget: 64 * mib}.withDefaults()
	for _, limit := range []brokerLimit{
		{bytes: 16 * mib, source: limitProbed},                                    // 4 × 16 MiB + 2 MiB > 64 MiB
		{bytes: 128 * mib, source: limitConfigured},                               // far over
		{bytes: rabbitHardMaxMessageSize, source: limitAssumed, why: "the probe"}, // farther
	} {
		_, err := planMemory(cfg, limit)
		if !errors.Is(err, ErrOverMemoryBudget) {
			t.Fatalf("limit %d: err %v, want ErrOverMemoryBudget", limit.bytes, err)
		}
		msg := err.Error()
		for _, want := range []string{"67108864", "4 channels", "max_message_size " + strconv.FormatInt(limit.bytes, 10), "raise Config.MemoryBudget", "lower the broker's max_message_size"} {
			if !strings.Contains(msg, want) {
				t.Errorf("error %q does not say %q", msg, want)
			}
		}
		if limit.source == limitAssumed && (!strings.Contains(msg, "Config.BrokerMaxMessageSize") || !strings.Contains(msg, "at most MaxBodyBytes (1048576) so the probe reads it")) {
			t.Errorf("error %q for an unknown limit does not point at Config.BrokerMaxMessageSize and a limit the probe can read", msg)
		}
	}
}

// A broker that accepts the probe may have any limit up to RabbitMQ's
// maximum: a budget is planned with that maximum, so it holds however far
// the operator raised the limit, and refuses what only a smaller limit
// would fit.
func TestPlanMemoryWithAnUnknownLimitUsesTheMaximum(t *testing.T) {
	t.Parallel()
	unknown := resolveLimit(mib+1, 0, "", nil) // the broker accepted a 1 MiB + 1 probe
	cfg := Config{Name: "q", Channels: 2, Prefetch: 100, Workers: 8}.withDefaults()

	cfg.MemoryBudget = 2*3*512*mib + 8*mib // 2 channels × 3 × 512 MiB + 8 workers × 1 MiB
	plan, err := planMemory(cfg, unknown)
	if err != nil {
		t.Fatal(err)
	}
	if plan.prefetch != 3 || plan.worstCase != cfg.MemoryBudget {
		t.Errorf("plan = prefetch %d, worst case %d; want 3, %d", plan.prefetch, plan.worstCase, cfg.MemoryBudget)
	}

	// Enough for 2 × 1 × 128 MiB, the 3.x default, but not for the maximum.
	cfg.MemoryBudget = 2*128*mib + 8*mib
	if _, err := planMemory(cfg, unknown); !errors.Is(err, ErrOverMemoryBudget) {
		t.Errorf("budget %d with an unknown limit: err %v, want ErrOverMemoryBudget", cfg.MemoryBudget, err)
	}
}

// Without a budget, an unknown limit is logged as a range whose names say
// so: at least what the accepted probe shows, at most RabbitMQ's maximum.
// A known one is logged exactly.
func TestMemoryPlanLogsAnUnknownLimitAsARange(t *testing.T) {
	t.Parallel()
	cfg := Config{Name: "q", Channels: 2, Prefetch: 10, Workers: 4}.withDefaults()
	attrs := func(l brokerLimit) map[string]any {
		plan, err := planMemory(cfg, l)
		if err != nil {
			t.Fatal(err)
		}
		kv := plan.logAttrs()
		m := map[string]any{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	}
	cases := []struct {
		name  string
		limit brokerLimit
		want  map[string]any
	}{
		{"accepted", resolveLimit(mib+1, 0, "", nil), map[string]any{
			"max_message_size_source":          limitAssumed,
			"broker_max_message_size_at_least": int64(mib + 1),
			"worst_case_bytes_at_least":        int64(2*10*(mib+1) + 4*mib),
			"worst_case_bytes_at_most":         int64(2*10*512*mib + 4*mib),
		}},
		// A stock broker's figure is its version's default.
		{"accepted by RabbitMQ 4.1", resolveLimit(mib+1, 0, "4.1.3", nil), map[string]any{
			"max_message_size_source":          limitAssumed,
			"broker_max_message_size_at_least": int64(mib + 1),
			"worst_case_bytes_at_least":        int64(2*10*(mib+1) + 4*mib),
			"rabbitmq_version":                 "4.1.3",
			"default_max_message_size":         int64(16 * mib),
			"worst_case_bytes_at_default":      int64(2*10*16*mib + 4*mib),
			"worst_case_bytes_at_most":         int64(2*10*512*mib + 4*mib),
		}},
		{"probe failed", resolveLimit(mib+1, 0, "3.13.7", errors.New("blocked")), map[string]any{
			"max_message_size_source":  limitAssumed,
			"worst_case_bytes_at_most": int64(2*10*512*mib + 4*mib),
		}},
		{"probed", resolveLimit(mib+1, 262144, "3.13.7", nil), map[string]any{
			"max_message_size_source": limitProbed,
			"broker_max_message_size": int64(262144),
			"worst_case_bytes":        int64(2*10*262144 + 4*262144),
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := attrs(tc.limit); !maps.Equal(got, tc.want) {
				t.Errorf("log attributes %v, want %v", got, tc.want)
			}
		})
	}
}

func TestPlanMemorySaturates(t *testing.T) {
	t.Parallel()
	cfg := Config{Name: "q", Channels: 1 << 40, Prefetch: 65535}.withDefaults()
	plan, err := planMemory(cfg, brokerLimit{bytes: rabbitHardMaxMessageSize, source: limitAssumed})
	if err != nil {
		t.Fatal(err)
	}
	if plan.worstCase != 1<<63-1 {
		t.Errorf("worst case %d, want it saturated at MaxInt64", plan.worstCase)
	}
}

func TestResolveLimit(t *testing.T) {
	t.Parallel()
	const probe = mib + 1
	cases := []struct {
		name  string
		limit int64
		err   error
		want  brokerLimit
	}{
		{"refused with the limit", 262144, nil, brokerLimit{bytes: 262144, source: limitProbed}},
		{"refused, text unreadable", -1, nil, brokerLimit{bytes: mib, source: limitProbed}},
		{"accepted", 0, nil, brokerLimit{bytes: 512 * mib, source: limitAssumed, atLeast: probe}},
		{"failed", 0, errors.New("blocked"), brokerLimit{bytes: 512 * mib, source: limitAssumed, probeFailed: true}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := resolveLimit(probe, tc.limit, "", tc.err)
			if got.bytes != tc.want.bytes || got.source != tc.want.source || got.atLeast != tc.want.atLeast || got.probeFailed != tc.want.probeFailed {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
			if got.source == limitAssumed && got.why == "" {
				t.Error("an assumed limit does not say why")
			}
		})
	}
}

func TestLimitFromClose(t *testing.T) {
	t.Parallel()
	cases := []struct {
		e       *amqp.Error
		want    int64
		wantErr bool
	}{
		{&amqp.Error{Code: amqp.PreconditionFailed, Reason: "PRECONDITION_FAILED - message size 1048577 is larger than configured max size 262144"}, 262144, false},
		{&amqp.Error{Code: amqp.PreconditionFailed, Reason: "PRECONDITION_FAILED - message size 600000000 is larger than max size 536870912"}, 536870912, false},
		{&amqp.Error{Code: amqp.PreconditionFailed, Reason: "PRECONDITION_FAILED - something else"}, -1, false},
		{&amqp.Error{Code: amqp.AccessRefused, Reason: "ACCESS_REFUSED - write access to exchange 'amq.default' refused"}, 0, true},
		{nil, 0, true},
	}
	for _, tc := range cases {
		got, err := limitFromClose(tc.e)
		if got != tc.want || (err != nil) != tc.wantErr {
			t.Errorf("limitFromClose(%v) = %d, %v; want %d, error %v", tc.e, got, err, tc.want, tc.wantErr)
		}
	}
}

// With several nodes, a node that accepts connections but never answers
// (a stalled network) takes only its share of the probe's time: the probe
// reaches the node that answers, whichever order the dial picks.
func TestProbeGetsPastANodeThatNeverAnswers(t *testing.T) {
	// Serial: the answering node gets only what the stalled one left of the probe's 5s, a budget parallel load eats into.
	brokerURL := testenv.AMQPURL(t)
	u, err := url.Parse(brokerURL)
	if err != nil {
		t.Fatal(err)
	}
	stalled := testenv.StartProxy(t, u.Host)
	stalled.Stall(true)
	list := stalled.URL(t, brokerURL) + "," + brokerURL
	for range 4 { // the dial starts at a random node: each try has even odds of the stalled one first
		if limit, _, err := probeBrokerLimit(context.Background(), list, t.Name(), mib+1); err != nil || limit != 0 {
			t.Fatalf("probe = %d, %v; want the answering node's (accepted, limit 0)", limit, err)
		}
	}
}

// The default max_message_size of each RabbitMQ version the consumer
// reports a stock broker's worst case with.
func TestVersionDefaultLimit(t *testing.T) {
	t.Parallel()
	for version, want := range map[string]int64{
		"3.7.28": 0, "3.8.0": 128 * mib, "3.10.8": 128 * mib, "3.13.7": 128 * mib,
		"4.0.0": 16 * mib, "4.1.3": 16 * mib, "": 0, "unknown": 0, "4": 0,
	} {
		if got := versionDefaultLimit(version); got != want {
			t.Errorf("versionDefaultLimit(%q) = %d, want %d", version, got, want)
		}
	}
}
