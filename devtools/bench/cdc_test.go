package main

import (
	"context"
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The CDC scenarios are in the default set, `-run cdc` selects them and
// nothing else, and each judges the CDC relay alone, on issue 18's
// targets.
func TestCDCScenarios(t *testing.T) {
	run := regexp.MustCompile("cdc")
	var names []string
	byName := map[string]scenario{}
	for _, s := range scenarios([]int{1000, 3000}) {
		if run.MatchString(s.name) {
			names = append(names, s.name)
			byName[s.name] = s
		}
	}
	want := []string{"cdc relay", "cdc commit → publish latency, 1000 events/s", "cdc producers"}
	if !slices.Equal(names, want) {
		t.Fatalf("-run cdc selects %q; want %q", names, want)
	}
	targets := map[string][]target{
		"cdc relay": {{ratio: 1.6}},
		"cdc commit → publish latency, 1000 events/s": {{bound: 2}, {bound: 20}, {bound: 970}},
		"cdc producers": {{ratio: 0.95}},
	}
	for name, s := range byName {
		for mi, m := range s.metricList() {
			if m.target != targets[name][mi] {
				t.Errorf("%s: %s target %+v, want %+v", name, m.name, m.target, targets[name][mi])
			}
		}
		judged := 0
		for _, v := range s.variants {
			if !v.judged() {
				continue
			}
			judged++
			if !strings.Contains(v.name, "CDC") || v.why == "" || v.run == nil {
				t.Errorf("%s: judged variant %q is not the CDC relay, or has no why or no run", name, v.name)
			}
		}
		if judged == 0 {
			t.Errorf("%s judges no variant", name)
		}
	}
}

// startRelay returns once the relay is ready, or with the error of a
// relay that stopped before; stop ends it and returns its error, however
// often it is called.
func TestStartRelay(t *testing.T) {
	ctx := context.Background()
	broken := errors.New("no slot")
	_, err := startRelay(ctx, nil, nil, func(context.Context, *env, *outboxBench, func()) error { return broken })
	if err == nil || !strings.Contains(err.Error(), "no slot") {
		t.Fatalf("startRelay of a relay that failed before ready: %v", err)
	}

	stopped := make(chan struct{})
	rel, err := startRelay(ctx, nil, nil, func(ctx context.Context, _ *env, _ *outboxBench, ready func()) error {
		ready()
		ready() // a second call is harmless
		<-ctx.Done()
		close(stopped)
		return broken
	})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-stopped:
		t.Fatal("the relay stopped before stop")
	default:
	}
	if err := rel.stop(); err != broken {
		t.Fatalf("stop = %v, want the relay's error", err)
	}
	if err := rel.stop(); err != broken {
		t.Fatalf("second stop = %v, want the relay's error again", err)
	}
}
