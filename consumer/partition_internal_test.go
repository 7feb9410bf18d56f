package consumer

import (
	"slices"
	"testing"
	"time"
)

func TestPartitionRetryDelay(t *testing.T) {
	t.Parallel()
	s, m := time.Second, time.Minute
	delays := []time.Duration{s, 10 * s, m, 10 * m}
	cases := []struct {
		name    string
		attempt int
		hint    time.Duration
		want    time.Duration
	}{
		{"first failure waits the first delay", 1, 0, s},
		{"second failure the second", 2, 0, 10 * s},
		{"a delay over the cap is capped", 3, 0, partitionRetryCap},
		{"later attempts keep the last delay, capped", 9, 0, partitionRetryCap},
		{"attempt 0 (deferral) is the first delay", 0, 0, s},
		{"a hint picks the smallest delay at least as long", 1, 2 * s, 10 * s},
		{"a hint past every delay takes the last, capped", 1, time.Hour, partitionRetryCap},
		{"a short hint the first", 4, time.Millisecond, s},
	}
	for _, tc := range cases {
		if got := partitionRetryDelay(delays, tc.attempt, tc.hint); got != tc.want {
			t.Errorf("%s: partitionRetryDelay(attempt %d, hint %v) = %v, want %v", tc.name, tc.attempt, tc.hint, got, tc.want)
		}
	}
	if got := partitionRetryDelay([]time.Duration{5 * time.Millisecond}, 3, 0); got != 5*time.Millisecond {
		t.Errorf("short delays are kept: got %v", got)
	}
}

func TestPartitionsToRelease(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name        string
		n, replicas int
		active      []int
		want        []int
	}{
		{"alone it keeps them all", 4, 1, []int{0, 1, 2, 3}, nil},
		{"a second replica: half each", 4, 2, []int{0, 1, 2, 3}, []int{2, 3}},
		{"three replicas of four: at most two each", 4, 3, []int{3, 1, 0, 2}, []int{2, 3}},
		{"within its share it keeps them", 4, 3, []int{1, 3}, nil},
		{"more replicas than partitions: one each", 4, 6, []int{0, 2}, []int{2}},
		{"nothing active, nothing to release", 4, 2, nil, nil},
		{"replicas unknown (0) counts as alone", 4, 0, []int{0, 1, 2, 3}, nil},
		{"eight of three: at most three", 8, 3, []int{0, 1, 2, 3, 4, 5, 6, 7}, []int{3, 4, 5, 6, 7}},
	}
	for _, tc := range cases {
		if got := partitionsToRelease(tc.n, tc.replicas, tc.active); !slices.Equal(got, tc.want) {
			t.Errorf("%s: partitionsToRelease(%d, %d, %v) = %v, want %v", tc.name, tc.n, tc.replicas, tc.active, got, tc.want)
		}
	}
}

func TestPartitionTopologyNames(t *testing.T) {
	t.Parallel()
	topo := TopologyFor(Config{Name: "orders", Partitions: 3})
	if topo.PartitionExchange != "orders.partitions" || !slices.Equal(topo.PartitionQueues, []string{"orders.p0", "orders.p1", "orders.p2"}) {
		t.Errorf("names: %q %q", topo.PartitionExchange, topo.PartitionQueues)
	}
	if len(topo.Retry) != 0 {
		t.Errorf("retry tiers %v, want none: a partition retries in place", topo.Retry)
	}
	if want := []string{"orders.p0", "orders.p1", "orders.p2", "orders.replicas", "orders.dlq"}; !slices.Equal(topo.Queues(), want) {
		t.Errorf("Queues() = %q, want %q", topo.Queues(), want)
	}
	if want := []string{"warren.events", "orders.dlx", "orders.partitions"}; !slices.Equal(topo.Exchanges(), want) {
		t.Errorf("Exchanges() = %q, want %q", topo.Exchanges(), want)
	}
	cfg := Config{Name: "orders", Partitions: 3}.withDefaults()
	main, others := topo.queueSpecs(cfg)
	for _, q := range others[1:] { // after the DLQ
		if q.args["x-single-active-consumer"] != true || q.args["x-dead-letter-exchange"] != "orders.dlx" || q.args["x-message-ttl"] != main.args["x-message-ttl"] {
			t.Errorf("partition queue %s args %v", q.name, q.args)
		}
	}
	for _, bad := range []Config{{Name: "o", Partitions: -1}, {Name: "o", Partitions: MaxPartitions + 1}, {Name: "o", Partitions: 2, AdoptQueue: true}} {
		if _, err := New(bad); err == nil {
			t.Errorf("New(%+v) accepted", bad)
		}
	}
}
