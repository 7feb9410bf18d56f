package main

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// Each cluster fault is followed at once by the one that brings its node
// back, and only those are.
func TestScheduleUndoesEveryClusterFault(t *testing.T) {
	counts := clusterCounts(modes["short"])
	plan := schedule(rand.New(rand.NewPCG(3, 4)), counts)
	got := map[faultKind]int{}
	for i, k := range plan {
		got[k]++
		if undo, ok := undoFault[k]; ok && (i+1 == len(plan) || plan[i+1] != undo) {
			t.Errorf("fault %d, %s, is not followed by %s", i, k, undo)
		}
		if isUndo(k) && (i == 0 || undoFault[plan[i-1]] != k) {
			t.Errorf("fault %d, %s, does not follow the fault it undoes", i, k)
		}
	}
	for k, want := range counts {
		if got[k] != want {
			t.Errorf("%s: scheduled %d times, want %d", k, got[k], want)
		}
		if undo, ok := undoFault[k]; ok && got[undo] != want {
			t.Errorf("%s: scheduled %d times, want %d (one per %s)", undo, got[undo], want, k)
		}
	}
	for _, k := range []faultKind{faultNodeKill, faultNodeStopApp} {
		if counts[k] == 0 {
			t.Errorf("the short cluster mode does not inject %s", k)
		}
	}
}

// The cluster mode leaves out the single node's stop_app and outage, with
// a reason, keeps the rest, and refuses the left-out kinds by name; the
// single mode refuses the cluster's.
func TestClusterFaultSelection(t *testing.T) {
	for name, m := range modes {
		counts := clusterCounts(m)
		for k := range leftOutOnCluster {
			if counts[k] != 0 {
				t.Errorf("%s: %s left out on a cluster yet scheduled", name, k)
			}
			if m.counts[k] == 0 {
				t.Errorf("%s: %s dropped from the single node's faults", name, k)
			}
		}
		for k := range m.clusterCounts {
			if m.counts[k] != 0 {
				t.Errorf("%s: cluster fault %s scheduled on a single node", name, k)
			}
		}
		if err := checkBrokerFaults(brokerCluster, counts); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if err := checkBrokerFaults(brokerSingle, m.counts); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if err := checkBrokerFaults(brokerCluster, map[faultKind]int{faultBrokerOutage: 1}); err == nil || !strings.Contains(err.Error(), "quorum") {
		t.Errorf("broker outage on a cluster: %v, want a refusal with the reason", err)
	}
	if err := checkBrokerFaults(brokerSingle, map[faultKind]int{faultNodeKill: 1}); err == nil {
		t.Error("node kill accepted on a single node")
	}
	for _, k := range []faultKind{faultNodeKill, faultNodeRestart, faultNodeStopApp, faultNodeStartApp} {
		if !slices.Contains(faultOrder, k) {
			t.Errorf("%s has no row in the report's order", k)
		}
	}
	if reportName(relayPoll, brokerCluster) != "RELIABILITY-cluster.md" || reportName(relayPoll, brokerSingle) != "RELIABILITY.md" {
		t.Errorf("report names %q, %q", reportName(relayPoll, brokerCluster), reportName(relayPoll, brokerSingle))
	}
}

// A node's loss explains a duplicate only for a replica connected to the
// node, and only while the event was in flight there.
func TestNodeLossExplainsDuplicate(t *testing.T) {
	base := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return base.Add(time.Duration(s) * time.Second) }
	twice := []acceptance{{at: at(0), poster: "webhook-a"}, {at: at(20), poster: "webhook-b"}}
	loss := func(from int, procs ...string) []nodeLoss {
		return []nodeLoss{{kind: faultNodeKill, from: at(from), to: at(from + 5), procs: procs}}
	}
	if got, _ := explainDuplicate(twice, evidence{losses: loss(1, "relay-a", "webhook-a")}); got != causeNodeLost {
		t.Errorf("node of the poster lost right after the 200: cause %q", got)
	}
	if got, _ := explainDuplicate(twice, evidence{losses: loss(1, "webhook-b")}); got != "" {
		t.Errorf("node of another replica lost: cause %q, want none", got)
	}
	if got, _ := explainDuplicate(twice, evidence{losses: loss(5, "webhook-a")}); got != "" {
		t.Errorf("node lost long after the done-mark was due: cause %q, want none", got)
	}
	if got, _ := explainDuplicate(twice, evidence{losses: loss(-30, "webhook-a")}); got != "" {
		t.Errorf("node lost before the delivery: cause %q, want none", got)
	}
}

// An exit is laid to a cluster fault while that fault is the latest one.
func TestNodeFaultBefore(t *testing.T) {
	base := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return base.Add(time.Duration(s) * time.Second) }
	kill := &faultRecord{kind: faultNodeKill, start: at(10), end: at(11), node: 2}
	h := &harness{faults: []*faultRecord{
		{kind: faultKillRelay, start: at(0), end: at(0)},
		kill,
		{kind: faultNodeRestart, start: at(20), end: at(30), node: 2},
		{kind: faultPGTerminate, start: at(40), end: at(40)},
	}}
	for _, c := range []struct {
		at   int
		want faultKind
	}{{5, ""}, {12, faultNodeKill}, {25, faultNodeRestart}, {35, faultNodeRestart}, {45, ""}} {
		got := h.nodeFaultBefore(at(c.at))
		var kind faultKind
		if got != nil {
			kind = got.kind
		}
		if kind != c.want {
			t.Errorf("exit at %ds laid to %q, want %q", c.at, kind, c.want)
		}
	}
	if got := h.nodeFaultBefore(at(12)); got != kill {
		t.Errorf("exit at 12s laid to %v, want the kill", got)
	}
}
