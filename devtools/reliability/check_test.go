package main

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/warrenmq/warren/dlq"
	"github.com/warrenmq/warren/examples/app"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

func TestExplainDuplicate(t *testing.T) {
	twice := []acceptance{{at: at(10), poster: "webhook-a"}, {at: at(71), poster: "webhook-b"}}
	cases := []struct {
		name    string
		kills   map[string][]time.Time
		stalls  []stall
		redis   []time.Time
		want    string // "" means unexplained
		unnamed bool   // the receiver could not name the first poster
	}{
		{name: "no fault", want: ""},
		{name: "poster killed just after the 200", kills: map[string][]time.Time{"webhook-a": {at(10.01)}}, want: causePosterKilled},
		{name: "the other replica killed", kills: map[string][]time.Time{"webhook-b": {at(10.01)}}, want: ""},
		{name: "poster killed long before", kills: map[string][]time.Time{"webhook-a": {at(2)}}, want: ""},
		{name: "poster killed long after", kills: map[string][]time.Time{"webhook-a": {at(30)}}, want: ""},
		{name: "redis restart between", redis: []time.Time{at(40)}, want: causeRedisRestart},
		{name: "redis restart before both", redis: []time.Time{at(5)}, want: ""},
		{name: "poster frozen past the lease", stalls: []stall{{proc: "webhook-a", from: at(9.5), to: at(85)}}, want: causePosterFrozen},
		{name: "unnamed poster, a replica killed just after the 200", kills: map[string][]time.Time{"webhook-b": {at(10.01)}}, want: causePosterKilled, unnamed: true},
		{name: "unnamed poster, no kill near", kills: map[string][]time.Time{"webhook-b": {at(30)}}, want: "", unnamed: true},
		{name: "poster frozen briefly", stalls: []stall{{proc: "webhook-a", from: at(9.5), to: at(20)}}, want: ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			acc := slices.Clone(twice)
			if c.unnamed {
				acc[0].poster = "unknown"
			}
			got, detail := explainDuplicate(acc, evidence{kills: c.kills, stalls: c.stalls, redisRestarts: c.redis})
			if got != c.want {
				t.Fatalf("cause %q, want %q", got, c.want)
			}
			if !strings.Contains(detail, acc[0].poster+" at 03:04:15.000") || !strings.Contains(detail, "webhook-b at 03:05:16.000") {
				t.Fatalf("detail %q does not list the deliveries", detail)
			}
		})
	}
}

// A receiver that held its answer to about the sender's timeout may count
// a delivery the sender saw time out and retried; one answered in time
// explains nothing.
func TestExplainDuplicateOfAnAnswerHeldToTheSendersTimeout(t *testing.T) {
	for _, c := range []struct {
		held time.Duration
		want string
	}{{10*time.Second + 40*time.Millisecond, causeSenderTimeout}, {9500 * time.Millisecond, causeSenderTimeout}, {3 * time.Second, ""}} {
		twice := []acceptance{{at: at(10), poster: "webhook-a", held: c.held}, {at: at(11), poster: "webhook-b"}}
		if got, _ := explainDuplicate(twice, evidence{}); got != c.want {
			t.Errorf("held %v: cause %q, want %q", c.held, got, c.want)
		}
	}
}

func TestExplainDuplicateNeedsEveryRepeatExplained(t *testing.T) {
	thrice := []acceptance{{at: at(10), poster: "webhook-a"}, {at: at(71), poster: "webhook-b"}, {at: at(80), poster: "webhook-a"}}
	kills := map[string][]time.Time{"webhook-a": {at(10.01)}}
	if got, _ := explainDuplicate(thrice, evidence{kills: kills}); got != "" {
		t.Fatalf("the third delivery has no fault behind it, yet the duplicate was explained: %q", got)
	}
	if got, _ := explainDuplicate(thrice, evidence{kills: kills, redisRestarts: []time.Time{at(75)}}); got == "" {
		t.Fatal("a kill and a Redis restart explain both repeats, yet the duplicate was not explained")
	}
}

func TestDeadLetterProblems(t *testing.T) {
	good := dlq.Metadata{
		Class: dlq.ClassUndecodable, Error: "invalid event: event_id is missing or empty", Attempts: 1,
		OriginQueue: webhookQueue, Consumer: webhookQueue, OriginExchange: exchange, Host: "vm",
		FirstFailure: t0, LastFailure: t0,
	}
	want := deadAs(dlq.ClassUndecodable, "event_id is missing")
	sent := t0.Add(-time.Second)
	if p := deadLetterProblems(good, want, webhookQueue, sent); len(p) != 0 {
		t.Fatalf("a correct dead letter has problems: %v", p)
	}
	for name, mutate := range map[string]func(*dlq.Metadata){
		"class":    func(m *dlq.Metadata) { m.Class = dlq.ClassExpired },
		"reason":   func(m *dlq.Metadata) { m.Error = "something else" },
		"attempts": func(m *dlq.Metadata) { m.Attempts = 2 },
		"queue":    func(m *dlq.Metadata) { m.OriginQueue = autoQueue },
		"consumer": func(m *dlq.Metadata) { m.Consumer = "" },
		"exchange": func(m *dlq.Metadata) { m.OriginExchange = "" },
		// What a producer's forged headers leave when they are kept.
		"forged exchange":    func(m *dlq.Metadata) { m.OriginExchange = forgedOrigin + ".exchange" },
		"forged routing key": func(m *dlq.Metadata) { m.OriginRoutingKey = forgedOrigin },
		"forged error":       func(m *dlq.Metadata) { m.Error += "; " + forgedError },
		"forged attempts":    func(m *dlq.Metadata) { m.Attempts = 100 },
		"forged first failure": func(m *dlq.Metadata) {
			m.FirstFailure = time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
		},
		"host":  func(m *dlq.Metadata) { m.Host = "" },
		"times": func(m *dlq.Metadata) { m.FirstFailure = time.Time{} },
	} {
		m := good
		mutate(&m)
		if p := deadLetterProblems(m, want, webhookQueue, sent); len(p) != 1 {
			t.Errorf("wrong %s: problems %v, want exactly one", name, p)
		}
	}
}

func TestQualifies(t *testing.T) {
	done := eventRecord{typ: app.TypeStateUpdated, initiator: "USER", field: "state_id", prev: "in_progress", value: ruleState}
	if !done.qualifies() {
		t.Fatal("a user's change to done must fire the rule")
	}
	for name, e := range map[string]eventRecord{
		"by an import":    {typ: app.TypeStateUpdated, initiator: "SYSTEM.IMPORT", field: "state_id", prev: "todo", value: ruleState},
		"by a follow-up":  {typ: app.TypeStateUpdated, initiator: "SYSTEM.AUTOMATION", field: "state_id", prev: "todo", value: ruleState},
		"to in_progress":  {typ: app.TypeStateUpdated, initiator: "USER", field: "state_id", prev: "todo", value: "in_progress"},
		"priority":        {typ: "workitem.updated", initiator: "USER", field: "priority", prev: "high", value: ruleState},
		"a creation":      {typ: "workitem.created", initiator: "USER"},
		"no state change": {typ: app.TypeStateUpdated, initiator: "USER", field: "state_id", prev: ruleState, value: ruleState},
	} {
		if e.qualifies() {
			t.Errorf("%s must not fire the rule", name)
		}
	}
}

func TestTrackerCompleteness(t *testing.T) {
	tr := newTracker()
	plain := &eventRecord{id: "a", typ: "workitem.created", initiator: "USER"}
	ruled := &eventRecord{id: "b", typ: app.TypeStateUpdated, initiator: "USER", field: "state_id", prev: "todo", value: ruleState}
	undone := &eventRecord{id: "c", typ: "workitem.created", initiator: "USER"}
	tr.add(plain, ruled, undone)
	tr.settle([]*eventRecord{plain, ruled}, statusCommitted, t0)
	tr.settle([]*eventRecord{undone}, statusRolledBack, time.Time{})
	if got := len(tr.outstanding()); got != 2 {
		t.Fatalf("outstanding %d, want 2 (the rolled-back event is not awaited)", got)
	}
	tr.webhookSeen("a", t0)
	tr.webhookSeen("b", t0)
	if !tr.complete("a") || tr.complete("b") {
		t.Fatal("a needs only the webhook; b also needs its rule run")
	}
	tr.autoSeen("b", t0)
	if len(tr.outstanding()) != 0 || len(tr.remaining([]string{"a", "b"})) != 0 {
		t.Fatal("both events reached their effects")
	}
}

func TestScheduleHasEveryFaultOnce(t *testing.T) {
	counts := modes["short"].counts
	plan := schedule(rand.New(rand.NewPCG(1, 2)), counts)
	got := map[faultKind]int{}
	for _, k := range plan {
		got[k]++
	}
	for k, n := range counts {
		if got[k] != n {
			t.Errorf("%s: scheduled %d times, want %d", k, got[k], n)
		}
	}
}

// An event the receiver refuses at four attempts waits in the last retry
// tier; every mode's drain outlasts that wait (with margin for the
// redelivery), or an event not lost would count as undelivered, as a CI
// run's did with the short mode's drain of 100s and a 10m tier.
func TestDrainOutlastsTheLastRetryTier(t *testing.T) {
	for name, m := range modes {
		last := slices.Max(m.retryDelays)
		if m.drainTimeout < last+30*time.Second {
			t.Errorf("%s: drain %v, last retry tier %v", name, m.drainTimeout, last)
		}
		// The consumers read the tiers the harness expects (it names
		// their queues after them).
		var got []time.Duration
		for _, kv := range (&harness{mode: m}).consumerEnv() {
			if v, ok := strings.CutPrefix(kv, "WARREN_RETRY_DELAYS="); ok {
				for part := range strings.SplitSeq(v, ",") {
					d, err := time.ParseDuration(part)
					if err != nil {
						t.Fatal(err)
					}
					got = append(got, d)
				}
			}
		}
		if !slices.Equal(got, m.retryDelays) {
			t.Errorf("%s: the consumers are given tiers %v, want %v", name, got, m.retryDelays)
		}
	}
}

func TestPercentile(t *testing.T) {
	ds := []time.Duration{5, 1, 4, 2, 3}
	if p := percentile(ds, 0.5); p != 3 {
		t.Errorf("median %v, want 3", p)
	}
	if p := percentile(ds, 1); p != 5 {
		t.Errorf("max %v, want 5", p)
	}
	if p := percentile(nil, 0.5); p != 0 {
		t.Errorf("empty %v, want 0", p)
	}
}

func TestSelectFaults(t *testing.T) {
	counts := map[faultKind]int{faultMemoryAlarm: 3, faultKillRelay: 5}
	got, err := selectFaults("memory-alarm, dlq-shovel=2", counts)
	if err != nil {
		t.Fatal(err)
	}
	want := map[faultKind]int{faultMemoryAlarm: 3, faultDLQShovel: 2}
	if len(got) != len(want) || got[faultMemoryAlarm] != 3 || got[faultDLQShovel] != 2 {
		t.Fatalf("selectFaults = %v, want %v", got, want)
	}
	for _, bad := range []string{"nope", "memory-alarm=0", "pg-stall=x"} {
		if _, err := selectFaults(bad, counts); err == nil {
			t.Errorf("selectFaults(%q) accepted", bad)
		}
	}
	for id, kind := range faultIDs {
		if !slices.Contains(faultOrder, kind) {
			t.Errorf("fault %s (%s) has no row in the report's order", id, kind)
		}
	}
}

func TestRedisStallExplainsDuplicate(t *testing.T) {
	base := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return base.Add(time.Duration(s) * time.Second) }
	twice := []acceptance{{at: at(0), poster: "webhook-a"}, {at: at(70), poster: "webhook-b"}}
	if got, _ := explainDuplicate(twice, evidence{redisStalls: []stall{{from: at(1), to: at(66)}}}); got != causeRedisStalled {
		t.Errorf("stall right after the 200: cause %q", got)
	}
	if got, _ := explainDuplicate(twice, evidence{redisStalls: []stall{{from: at(30), to: at(40)}}}); got != "" {
		t.Errorf("stall long after the done-mark: cause %q, want none", got)
	}
}

// A POST the replica logged as failed without an answer, right as the
// receiver accepted it, explains the retry's second delivery; an answered
// failure (a status), another replica's failure or one long before does
// not.
func TestSendFailureExplainsDuplicate(t *testing.T) {
	twice := []acceptance{{at: at(10), poster: "webhook-b"}, {at: at(10.3), poster: "webhook-a"}}
	for _, c := range []struct {
		name     string
		failures map[string][]time.Time
		want     string
	}{
		{"the poster's POST failed as it was answered", map[string][]time.Time{"webhook-b": {at(10.01)}}, causeSendFailed},
		{"the poster's failure logged after its key release", map[string][]time.Time{"webhook-b": {at(10.2)}}, causeSendFailed},
		{"the other replica's failure", map[string][]time.Time{"webhook-a": {at(10.01)}}, ""},
		{"the poster failed long before", map[string][]time.Time{"webhook-b": {at(2)}}, ""},
		{"no failure logged", nil, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got, _ := explainDuplicate(twice, evidence{sendFailures: c.failures}); got != c.want {
				t.Fatalf("cause %q, want %q", got, c.want)
			}
		})
	}
}

func TestSendFailureOfReadsOnlyPOSTsThatGotNoAnswer(t *testing.T) {
	line := func(errText string) []byte {
		return []byte(`{"time":"2026-12-06T13:14:21.333481917Z","level":"WARN","msg":"event failed, will retry","event_id":"e085","consumer":"webhook","outcome":"retry","error":` + strconv.Quote(errText) + `}`)
	}
	for _, c := range []struct {
		err  string
		want bool
	}{
		{"POST http://127.0.0.1:44229/…#2ff522: context deadline exceeded (Client.Timeout exceeded while awaiting headers)", true},
		{"POST http://127.0.0.1:44229/…#2ff522: context canceled", true},
		{"POST http://127.0.0.1:44229/…#2ff522: 503 Service Unavailable: reliability: failing on purpose", false},
		{"POST http://127.0.0.1:44229/…#2ff522: endpoint answered 307 redirect to nowhere (no Location); webhooks do not follow redirects", false},
		{"POST http://127.0.0.1:1/…#aa: 503 Service Unavailable\nPOST http://127.0.0.1:44229/…#2ff522: read: connection reset by peer", true},
		{"dedup store: dial tcp 127.0.0.1:6379: connect: connection refused", false},
	} {
		at, id, ok := sendFailureOf(line(c.err))
		if ok != c.want {
			t.Errorf("%q: failure %v, want %v", c.err, ok, c.want)
		}
		if ok && (id != "e085" || at.IsZero()) {
			t.Errorf("%q: id %q at %v", c.err, id, at)
		}
	}
}

// The checker reads the webhook replicas' own logs: a failure without an
// answer is evidence for its replica and event only, and an unexplained
// duplicate prints what each replica said of the event.
func TestWebhookLogsAreReadPerReplica(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		path := filepath.Join(dir, name+".log")
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	timeout := `{"time":"2026-12-06T13:04:56.180Z","level":"WARN","msg":"event failed, will retry","event_id":"ev-1","error":"POST http://127.0.0.1:1/…#ab: context deadline exceeded"}` + "\n"
	refused := `{"time":"2026-12-06T13:04:57.000Z","level":"WARN","msg":"event failed, will retry","event_id":"ev-2","error":"POST http://127.0.0.1:1/…#ab: 503 Service Unavailable"}` + "\n"
	h := &harness{procs: []*proc{
		newProc(procSpec{name: "webhook-a", kind: "webhook"}, write("webhook-a", timeout)),
		newProc(procSpec{name: "webhook-b", kind: "webhook"}, write("webhook-b", refused)),
		newProc(procSpec{name: "relay-a", kind: "relay"}, write("relay-a", timeout)), // not a poster
		newProc(procSpec{name: "webhook-c", kind: "webhook"}, filepath.Join(dir, "missing.log")),
	}}
	failures := h.sendFailures()
	if len(failures) != 1 || len(failures["ev-1"]) != 1 || len(failures["ev-1"]["webhook-a"]) != 1 {
		t.Errorf("send failures %v, want only ev-1 by webhook-a", failures)
	}
	if got := h.logLinesOf("ev-2"); !strings.Contains(got, "webhook-b: ") || strings.Contains(got, "webhook-a") {
		t.Errorf("log lines of ev-2: %q, want webhook-b's line only", got)
	}
	if got := h.logLinesOf("ev-9"); got != "nothing" {
		t.Errorf("log lines of an event nobody logged: %q", got)
	}
}
