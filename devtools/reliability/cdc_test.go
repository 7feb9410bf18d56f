package main

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"
)

// The slot's lag must grow through a broker outage: a lag that stayed, or
// was never read, is a problem of the fault.
func TestOutageProblem(t *testing.T) {
	for _, c := range []struct {
		name string
		s    slotRecord
		want string // substring; "" means no problem
	}{
		{"grew", slotRecord{lagBefore: 10 << 10, lagAtLift: 900 << 10, lagPeak: 900 << 10, samples: 15}, ""},
		{"stayed", slotRecord{lagBefore: 10 << 10, lagAtLift: 10 << 10, lagPeak: 10 << 10, samples: 15}, "did not grow"},
		{"shrank", slotRecord{lagBefore: 10 << 10, lagAtLift: 2 << 10, lagPeak: 10 << 10, samples: 15}, "did not grow"},
		{"never read", slotRecord{lagBefore: 10 << 10}, "could not be read"},
	} {
		got := c.s.outageProblem()
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("%s: problem %q, want one containing %q", c.name, got, c.want)
		}
	}
}

// A slot has caught up with a fault once its confirmed position passed the
// lift's WAL position; after an outage, also once its lag fell below the
// peak.
func TestSlotSettled(t *testing.T) {
	plain := slotRecord{liftLSN: 1000}
	if plain.settled(999, 0) {
		t.Error("a slot behind the lift's position counts as caught up")
	}
	if !plain.settled(1000, 1<<20) {
		t.Error("a slot at the lift's position does not count as caught up (no outage: the lag does not matter)")
	}
	outage := slotRecord{liftLSN: 1000, lagPeak: 500 << 10, samples: 15}
	if outage.settled(2000, 600<<10) {
		t.Error("after an outage, a lag above the peak counts as caught up")
	}
	if !outage.settled(2000, 20<<10) {
		t.Error("after an outage, a slot past the lift with its lag back below the peak does not count as caught up")
	}
}

// The CDC relays are run with --mode cdc and none of the polling relay's
// flags, which the command refuses in that mode; the polling ones keep
// their lease.
func TestRelayArgs(t *testing.T) {
	cdcH := &harness{relays: relayCDC, mode: modes["short"]}
	args := cdcH.relayArgs("relay-a")
	if !slices.Contains(args, "--mode") || args[slices.Index(args, "--mode")+1] != "cdc" {
		t.Errorf("cdc relay args %q lack --mode cdc", args)
	}
	for _, refused := range []string{"--lease", "--workers", "--poll-min", "--poll-max", "--keep-delivered"} {
		if slices.Contains(args, refused) {
			t.Errorf("cdc relay args %q carry %s, which --mode cdc refuses", args, refused)
		}
	}
	pollArgs := (&harness{relays: relayPoll, mode: modes["short"]}).relayArgs("relay-a")
	if slices.Contains(pollArgs, "--mode") || !slices.Contains(pollArgs, "--lease") {
		t.Errorf("poll relay args %q: want --lease and no --mode", pollArgs)
	}
	settings := strings.Join(cdcH.postgresSettings(), " ")
	for _, want := range []string{"wal_level=logical", "max_replication_slots=", "max_wal_senders=", "wal_sender_timeout=5000ms"} {
		if !strings.Contains(settings, want) {
			t.Errorf("cdc cluster settings %q lack %s", settings, want)
		}
	}
	if s := (&harness{relays: relayPoll}).postgresSettings(); len(s) != 0 {
		t.Errorf("poll mode changes the cluster's settings: %q", s)
	}
}

// The two new faults are selectable by name and part of both modes.
func TestOutageAndRestartFaults(t *testing.T) {
	counts, err := selectFaults("broker-outage,pg-restart=3", modes["short"].counts)
	if err != nil {
		t.Fatal(err)
	}
	if counts[faultBrokerOutage] != 1 || counts[faultPGRestart] != 3 {
		t.Errorf("selected %v", counts)
	}
	for name, m := range modes {
		for _, k := range []faultKind{faultBrokerOutage, faultPGRestart} {
			if m.counts[k] == 0 || !slices.Contains(faultOrder, k) {
				t.Errorf("mode %s: %s not scheduled", name, k)
			}
		}
	}
	if modes["long"].brokerOutage != time.Minute || modes["short"].brokerOutage <= modes["short"].brokerDown {
		t.Errorf("outages: long %v (want a minute), short %v", modes["long"].brokerOutage, modes["short"].brokerOutage)
	}
	if reportName(relayCDC, brokerSingle) == reportName(relayPoll, brokerSingle) {
		t.Error("a long cdc run would overwrite the polling relays' RELIABILITY.md")
	}
}

// The large transaction's copies: a copy of an event already seen counts
// against the last session end before it arrived, other runs' events do
// not count, and maxDup is the worst end's share (never the copies before
// any end, which are a problem of their own).
func TestLargeTxCount(t *testing.T) {
	var r largeTxRecord
	arrivals := []tapArrival{
		{"a", 0}, {"b", 0}, {"other", 0}, {"a", 0}, // a duplicate before any end
		{"c", 1}, {"a", 1}, {"b", 1}, // end 1: two
		{"other", 2}, {"c", 2}, // end 2: one
	}
	if got := r.count(arrivals, []string{"a", "b", "c", "d"}); got != 3 {
		t.Errorf("%d events came, want 3 (d never did)", got)
	}
	if r.copies != 7 {
		t.Errorf("%d copies, want 7", r.copies)
	}
	if want := map[int]int{0: 1, 1: 2, 2: 1}; !maps.Equal(r.dups, want) {
		t.Errorf("duplicates per end %v, want %v", r.dups, want)
	}
	if r.maxDup() != 2 {
		t.Errorf("most after one end %d, want 2", r.maxDup())
	}
}

// The large transaction is the CDC relays' fault: asked for with the
// polling relays, the run refuses.
func TestCheckRelayFaults(t *testing.T) {
	counts := map[faultKind]int{faultLargeTx: 1, faultKillRelay: 2}
	if err := checkRelayFaults(relayPoll, counts); err == nil {
		t.Error("the large transaction accepted with the polling relays")
	}
	if err := checkRelayFaults(relayCDC, counts); err != nil {
		t.Errorf("with the CDC relays: %v", err)
	}
	if got := cdcCounts(modes["short"]); got[faultLargeTx] != 1 || modes["short"].counts[faultLargeTx] != 0 {
		t.Errorf("cdcCounts: %v; the mode's own counts must stay without it", got)
	}
}
