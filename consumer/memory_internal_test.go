package consumer

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/internal/testenv/localrabbit"
)

const mib = 1 << 20

func TestPlanMemoryWithoutBudgetKeepsPrefetch(t *testing.T) {
	cfg := Config{Name: "q"}.withDefaults()
	plan, err := planMemory(cfg, brokerLimit{bytes: 128 * mib, source: limitAssumed})
	if err != nil {
		t.Fatal(err)
	}
	// 4 channels × 256 × 128 MiB + 16 workers × 1 MiB.
	if want := int64(4*256*128*mib + 16*mib); plan.prefetch != 256 || plan.worstCase != want {
		t.Errorf("plan = prefetch %d, worst case %d; want 256, %d", plan.prefetch, plan.worstCase, want)
	}
}

func TestPlanMemoryLowersPrefetchToFitTheBudget(t *testing.T) {
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
	cfg := Config{Name: "q", Channels: 4, Workers: 2, MemoryBudget: 64 * mib}.withDefaults()
	for _, limit := range []brokerLimit{
		{bytes: 16 * mib, source: limitProbed},                     // 4 × 16 MiB + 2 MiB > 64 MiB
		{bytes: 128 * mib, source: limitAssumed, why: "the probe"}, // far over
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
		if limit.source == limitAssumed && !strings.Contains(msg, "Config.BrokerMaxMessageSize") {
			t.Errorf("error %q for an assumed limit does not point at Config.BrokerMaxMessageSize", msg)
		}
	}
}

func TestPlanMemorySaturates(t *testing.T) {
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
	const probe = mib + 1
	cases := []struct {
		name       string
		configured int64
		res        probeResult
		err        error
		want       brokerLimit
	}{
		{"refused with the limit", 4 * mib, probeResult{limit: 262144}, nil, brokerLimit{bytes: 262144, source: limitProbed}},
		{"refused, text unreadable", 0, probeResult{limit: -1}, nil, brokerLimit{bytes: mib, source: limitProbed}},
		{"accepted, configured", 4 * mib, probeResult{version: "3.10.8"}, nil, brokerLimit{bytes: 4 * mib, source: limitConfigured}},
		{"accepted, 3.x", 0, probeResult{version: "3.10.8"}, nil, brokerLimit{bytes: 128 * mib, source: limitAssumed}},
		{"accepted, 4.x", 0, probeResult{version: "4.1.0"}, nil, brokerLimit{bytes: 16 * mib, source: limitAssumed}},
		{"failed, version unknown", 0, probeResult{}, errors.New("blocked"), brokerLimit{bytes: 128 * mib, source: limitAssumed, probeFailed: true}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := resolveLimit(Config{BrokerMaxMessageSize: tc.configured}, probe, tc.res, tc.err)
			if got.bytes != tc.want.bytes || got.source != tc.want.source || got.probeFailed != tc.want.probeFailed {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
			if got.source == limitAssumed && got.why == "" {
				t.Error("an assumed limit does not say why")
			}
		})
	}
}

func TestLimitFromClose(t *testing.T) {
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

// The probe reads the exact limit of a real broker, set on a private node
// (channels read it when they open), and against the shared broker's
// default learns only that the limit is larger than the probe.
func TestProbeReadsTheBrokersLimit(t *testing.T) {
	node := localrabbit.Shared(t)
	node.SetMaxMessageSize(t, 262144)
	ctx := context.Background()
	res, err := probeBrokerLimit(ctx, node.URL(), t.Name(), mib+1)
	if err != nil {
		t.Fatal(err)
	}
	if res.limit != 262144 || !strings.HasPrefix(res.version, "3.") && !strings.HasPrefix(res.version, "4.") {
		t.Errorf("probe = %+v, want limit 262144 and the server's version", res)
	}

	res, err = probeBrokerLimit(ctx, testenv.AMQPURL(t), t.Name(), mib+1)
	if err != nil || res.limit != 0 {
		t.Errorf("probe of the shared broker = %+v, %v; want it accepted (limit 0)", res, err)
	}
}
