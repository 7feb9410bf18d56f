package dlq

import (
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"
)

var (
	t0 = time.Date(2025, 6, 1, 12, 0, 0, 123456789, time.UTC)
	t1 = t0.Add(90 * time.Second)
)

func failure(err string, at time.Time, exchange string) Failure {
	return Failure{Err: err, At: at, Queue: "webhook", Exchange: exchange, RoutingKey: "rk-" + exchange, Consumer: "webhook", Host: "host-1"}
}

func TestStampRecordsFailure(t *testing.T) {
	in := amqp.Table{"app": "kept"}
	h := Stamp(in, failure("boom", t0, "events"), 3, ClassPermanent)
	if len(in) != 1 {
		t.Fatalf("Stamp modified its input: %v", in)
	}
	m := ParseMetadata(h)
	want := Metadata{
		Error: "boom", Class: ClassPermanent, Attempts: 3, FirstFailure: t0, LastFailure: t0,
		OriginQueue: "webhook", OriginExchange: "events", OriginRoutingKey: "rk-events", Consumer: "webhook", Host: "host-1",
	}
	if !reflect.DeepEqual(m, want) {
		t.Fatalf("ParseMetadata(Stamp(…))\n got %+v\nwant %+v", m, want)
	}
	if h["app"] != "kept" {
		t.Error("Stamp dropped a producer header")
	}
	if _, ok := h[HeaderAttempts].(int32); !ok {
		t.Errorf("attempts stored as %T, want int32", h[HeaderAttempts])
	}
}

// A later stamp (the retry came back from a retry queue through the default
// exchange) keeps where the message first entered and when it first failed.
func TestStampKeepsFirstFailureAndOrigin(t *testing.T) {
	h := Stamp(nil, failure("first", t0, "events"), 1, "")
	if _, ok := h[HeaderErrorClass]; ok {
		t.Fatal("a retry stamp marked the message dead")
	}
	h = Stamp(h, failure("second", t1, ""), 2, ClassExhausted)
	m := ParseMetadata(h)
	if !m.FirstFailure.Equal(t0) || !m.LastFailure.Equal(t1) || m.OriginExchange != "events" || m.OriginRoutingKey != "rk-events" ||
		m.Error != "second" || m.Attempts != 2 || m.Class != ClassExhausted {
		t.Fatalf("second stamp: %+v", m)
	}
	// A stamp without a class clears an earlier one.
	if m := ParseMetadata(Stamp(h, failure("third", t1, ""), 3, "")); m.Class != "" {
		t.Fatalf("class %q survived a stamp without one", m.Class)
	}
}

func TestStampBoundsErrorText(t *testing.T) {
	long := strings.Repeat("é", MaxErrorLen) // 2 bytes each
	m := ParseMetadata(Stamp(nil, failure(long, t0, ""), 1, ClassPermanent))
	if !utf8.ValidString(m.Error) {
		t.Fatal("truncation split a rune")
	}
	if !strings.HasSuffix(m.Error, "…(truncated)") || len(m.Error) > MaxErrorLen+len("…(truncated)") {
		t.Fatalf("error text of %d bytes, want at most %d", len(m.Error), MaxErrorLen)
	}
	if short := ParseMetadata(Stamp(nil, failure("short", t0, ""), 1, "")); short.Error != "short" {
		t.Fatalf("short error became %q", short.Error)
	}
	if huge := ParseMetadata(Stamp(nil, failure("x", t0, ""), math.MaxInt64, "")); huge.Attempts != math.MaxInt32 {
		t.Fatalf("attempts %d, want clamped to MaxInt32", huge.Attempts)
	}
}

func TestParseMetadataAcceptsEveryIntegerWidth(t *testing.T) {
	for _, v := range []any{int8(7), uint8(7), int16(7), uint16(7), int32(7), uint32(7), int64(7), uint64(7), 7, "7"} {
		m := ParseMetadata(amqp.Table{HeaderAttempts: v, HeaderReplays: v})
		if m.Attempts != 7 || m.Replays != 7 || len(m.Problems) != 0 {
			t.Errorf("%T: attempts %d replays %d problems %v", v, m.Attempts, m.Replays, m.Problems)
		}
	}
}

func TestParseMetadataReportsBadHeaders(t *testing.T) {
	m := ParseMetadata(amqp.Table{
		HeaderError:        int32(5),
		HeaderAttempts:     "many",
		HeaderReplays:      uint64(math.MaxUint64),
		HeaderFirstFailure: "yesterday",
		HeaderLastFailure:  false,
		HeaderOriginQueue:  []byte("webhook"), // bytes are a string
		"x-death":          []any{"not a table", amqp.Table{"queue": "q", "reason": "something-new"}},
	})
	for _, name := range []string{HeaderError, HeaderAttempts, HeaderReplays, HeaderFirstFailure, HeaderLastFailure, "x-death[0]"} {
		if !slices.ContainsFunc(m.Problems, func(p string) bool { return strings.Contains(p, name+":") }) {
			t.Errorf("no problem reported for %s: %v", name, m.Problems)
		}
	}
	if len(m.Problems) != 6 {
		t.Errorf("%d problems, want 6: %v", len(m.Problems), m.Problems)
	}
	if m.OriginQueue != "webhook" || len(m.Deaths) != 1 || m.Deaths[0].Reason != "something-new" || m.Class != "" {
		t.Errorf("good headers next to bad ones: %+v", m)
	}
	if m := ParseMetadata(amqp.Table{"x-death": "expired"}); len(m.Problems) != 1 || m.Deaths != nil {
		t.Errorf("x-death of the wrong type: %+v", m)
	}
	if m := ParseMetadata(nil); !reflect.DeepEqual(m, Metadata{}) {
		t.Errorf("no headers: %+v", m)
	}
}

func TestParseMetadataTimestampHeader(t *testing.T) {
	at := time.Unix(1700000000, 0)
	if m := ParseMetadata(amqp.Table{HeaderLastFailure: at}); !m.LastFailure.Equal(at) || len(m.Problems) != 0 {
		t.Fatalf("AMQP timestamp header: %+v", m)
	}
}

func xDeath(reason, queue string, at time.Time) []any {
	return []any{amqp.Table{
		"queue": queue, "reason": reason, "exchange": "events", "routing-keys": []any{"rk", int32(3)},
		"count": int64(2), "time": at,
	}}
}

// A message RabbitMQ expired into the DLQ carries only x-death; it is still
// classified, with its origin.
func TestParseMetadataExpired(t *testing.T) {
	at := time.Unix(1700000000, 0)
	m := ParseMetadata(amqp.Table{"x-death": xDeath("expired", "webhook", at)})
	want := Metadata{
		Error: "dead-lettered by the broker (expired) from queue webhook", Class: ClassExpired, FirstFailure: at, LastFailure: at,
		OriginQueue: "webhook", OriginExchange: "events", OriginRoutingKey: "rk",
		Deaths: []Death{{Queue: "webhook", Reason: "expired", Exchange: "events", RoutingKeys: []string{"rk"}, Count: 2, Time: at}},
	}
	if !reflect.DeepEqual(m, want) {
		t.Fatalf("expired:\n got %+v\nwant %+v", m, want)
	}
	// warren's own class wins over x-death.
	h := Stamp(amqp.Table{"x-death": xDeath("expired", "webhook.retry.1s", at)}, failure("boom", t0, "events"), 2, ClassPermanent)
	if m := ParseMetadata(h); m.Class != ClassPermanent || m.OriginQueue != "webhook" || m.Error != "boom" {
		t.Fatalf("stamped message with x-death: %+v", m)
	}
	// The broker's other reasons classify too, by their own names.
	for reason, class := range map[string]Class{"rejected": ClassRejected, "maxlen": ClassMaxLen, "delivery_limit": ClassDeliveryLimit} {
		if m := ParseMetadata(amqp.Table{"x-death": xDeath(reason, "webhook", at)}); m.Class != class || m.OriginQueue != "webhook" || len(m.Deaths) != 1 {
			t.Fatalf("%s: %+v", reason, m)
		}
	}
	// A reason RabbitMQ may add later is recorded but not classified.
	if m := ParseMetadata(amqp.Table{"x-death": xDeath("something-new", "webhook", at)}); m.Class != "" || m.OriginQueue != "" || len(m.Deaths) != 1 {
		t.Fatalf("unknown reason: %+v", m)
	}
	// An error left by an earlier retry is context, not the cause.
	h = amqp.Table{"x-death": xDeath("expired", "webhook", at), HeaderError: "timeout"}
	if m := ParseMetadata(h); m.Class != ClassExpired || m.Error != "dead-lettered by the broker (expired) from queue webhook; last handler error before that: timeout" {
		t.Fatalf("expired after a retry: %+v", m)
	}
}

// StripDeaths removes every header RabbitMQ writes when it dead-letters a
// message and keeps, once, the first death from the message's own queue in
// warren's headers, so what ParseMetadata reports survives without x-death.
func TestStripDeaths(t *testing.T) {
	expired := time.Unix(1700000000, 0).UTC()
	tierHop := expired.Add(time.Hour)
	in := Stamp(amqp.Table{
		"app": "kept",
		// Most recent first: a hop through a retry tier, a death in
		// another system's queue, and the expiry in the consumer's queue.
		"x-death": []any{
			amqp.Table{"queue": "webhook.retry.1s", "reason": "expired", "count": int64(4), "time": tierHop},
			amqp.Table{"queue": "upstream", "reason": "maxlen", "count": int64(1), "time": expired.Add(-time.Hour)},
			amqp.Table{"queue": "webhook", "reason": "expired", "exchange": "events", "count": int64(1), "time": expired},
		},
		"x-first-death-queue": "upstream", "x-first-death-reason": "maxlen", "x-first-death-exchange": "",
		"x-last-death-queue": "webhook.retry.1s", "x-last-death-reason": "expired", "x-last-death-exchange": "",
		"x-delivery-count": int64(3), // from a quorum DLQ read three times
	}, failure("boom", t0, "events"), 2, ClassExhausted)
	before := maps.Clone(in)

	out := StripDeaths(in, "webhook")
	if !reflect.DeepEqual(in, before) {
		t.Fatal("StripDeaths changed its input")
	}
	for name := range out {
		if slices.Contains(brokerDeathHeaders, name) || name == "x-death" || name == "x-delivery-count" ||
			strings.HasPrefix(name, "x-first-death-") || strings.HasPrefix(name, "x-last-death-") {
			t.Errorf("%s survived", name)
		}
	}
	m := ParseMetadata(out)
	want := Death{Queue: "webhook", Reason: "expired", Time: expired}
	if !reflect.DeepEqual(m.FirstDeath, want) || len(m.Deaths) != 0 || len(m.Problems) != 0 {
		t.Fatalf("first death %+v, deaths %v, problems %v; want %+v and no x-death", m.FirstDeath, m.Deaths, m.Problems, want)
	}
	// warren's own record is untouched.
	if m.Class != ClassExhausted || m.Attempts != 2 || m.Error != "boom" || !m.FirstFailure.Equal(t0) || m.OriginQueue != "webhook" || out["app"] != "kept" {
		t.Fatalf("stripped metadata %+v", m)
	}

	// The record is written once: a later death in the same queue (the
	// message expired there again and was moved back again) does not
	// replace it, so it stays three headers however often the message
	// goes round.
	out["x-death"] = []any{amqp.Table{"queue": "webhook", "reason": "rejected", "time": tierHop}}
	again := StripDeaths(out, "webhook")
	if m := ParseMetadata(again); !reflect.DeepEqual(m.FirstDeath, want) || len(again) != len(out)-1 {
		t.Fatalf("second strip: first death %+v, %d headers from %d", m.FirstDeath, len(again), len(out))
	}

	// Only retry-tier hops: nothing to record. No origin known: nothing
	// either, but the headers still go.
	hops := amqp.Table{"x-death": []any{amqp.Table{"queue": "webhook.retry.1s", "reason": "expired", "time": tierHop}}, "x-first-death-queue": "webhook.retry.1s"}
	for _, origin := range []string{"webhook", ""} {
		if got := StripDeaths(hops, origin); len(got) != 0 {
			t.Errorf("origin %q: tier hops left %v", origin, got)
		}
	}
	// A reason the broker does not write (forged, or from a later
	// version) and entries of the wrong shape are not recorded.
	forged := amqp.Table{"x-death": []any{"not a table", amqp.Table{"queue": "webhook", "reason": strings.Repeat("x", 1000)}}}
	if got := StripDeaths(forged, "webhook"); len(got) != 0 {
		t.Errorf("forged x-death left %v", got)
	}
	if got := StripDeaths(amqp.Table{"x-death": "not an array"}, "webhook"); len(got) != 0 {
		t.Errorf("x-death of the wrong type left %v", got)
	}
	if StripDeaths(nil, "webhook") != nil {
		t.Error("nil headers came back non-nil")
	}

	// The broker dead-letters the stripped message again (it expired in
	// its queue once more): x-death classifies it as before, and the first
	// death still reads back.
	redead := maps.Clone(again)
	delete(redead, HeaderErrorClass)
	later := t1.Add(time.Hour)
	redead["x-death"] = xDeath("expired", "webhook", later)
	if m := ParseMetadata(redead); m.Class != ClassExpired || !m.LastFailure.Equal(later) || !reflect.DeepEqual(m.FirstDeath, want) {
		t.Fatalf("dead again: %+v", m)
	}
}

func TestIsQueueName(t *testing.T) {
	for name, want := range map[string]bool{
		QueueName("webhook"): true,
		"a.dlq":              true,
		".dlq":               false, // no consumer name
		"webhook":            false,
		"webhook.dlq.retry":  false,
		"webhook.retry.10m":  false,
		"webhookdlq":         false,
	} {
		if got := IsQueueName(name); got != want {
			t.Errorf("IsQueueName(%q) = %v, want %v", name, got, want)
		}
	}
}

// StripHistory removes every header of warren's failure record and the
// broker's death headers, and keeps the producer's own.
func TestStripHistory(t *testing.T) {
	// Every x-warren-* constant this package declares is part of the
	// record: a header added later must not slip past the consumer. All
	// but HeaderUnreadable, which is not history but the connection's
	// verdict on the delivery in hand: the consumer's frame filter sets it
	// on a first delivery too, and stripping it would hand a handler a
	// message whose headers were cut away.
	var own []string
	file, err := parser.ParseFile(token.NewFileSet(), "headers.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	ast.Inspect(file, func(n ast.Node) bool {
		if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
			if name, _ := strconv.Unquote(lit.Value); strings.HasPrefix(name, "x-warren-") && name != HeaderUnreadable {
				own = append(own, name)
			}
		}
		return true
	})
	if len(own) < 14 {
		t.Fatalf("found only %d x-warren-* headers in headers.go: %v", len(own), own)
	}
	producer := amqp.Table{"traceparent": "00-abc-def-01", "x-warren-initiator-type": "USER", "app": int32(7)}
	in := maps.Clone(producer)
	for _, name := range append(own, brokerDeathHeaders...) {
		in[name] = "forged"
	}
	before := maps.Clone(in)

	out := StripHistory(in)
	if !reflect.DeepEqual(in, before) {
		t.Fatal("StripHistory changed its input")
	}
	if !reflect.DeepEqual(out, producer) {
		t.Fatalf("StripHistory left %v, want only the producer's %v", out, producer)
	}
	if StripHistory(nil) != nil {
		t.Error("nil headers came back non-nil")
	}
	// One header of the record alone is enough to be stripped: StripHistory
	// copies only the headers that hold one.
	for _, name := range append(own, brokerDeathHeaders...) {
		in := maps.Clone(producer)
		in[name] = "forged"
		if out := StripHistory(in); !reflect.DeepEqual(out, producer) {
			t.Errorf("with only %s forged, StripHistory left %v", name, out)
		}
	}
	// A producer's headers, with no record, come back as they are: the
	// consumer strips every delivery, and a copy each would be for nothing.
	if allocs := testing.AllocsPerRun(100, func() { StripHistory(producer) }); allocs != 0 {
		t.Errorf("StripHistory of headers without a record allocated %v times, want 0", allocs)
	}
}

// The contract and field an error named are the latest failure's: a
// retry that failed on no field leaves neither behind, and a name too long
// for a header is cut.
func TestStampRecordsTheFieldThatFailed(t *testing.T) {
	f := failure("contract a@1: payload.data.x: got string, want integer", t0, "events")
	f.Contract, f.Field = "a@1", "payload.data.x"
	h := Stamp(nil, f, 1, ClassUndecodable)
	if m := ParseMetadata(h); m.Contract != "a@1" || m.Field != "payload.data.x" || len(m.Problems) > 0 {
		t.Fatalf("contract %q, field %q, problems %v; want a@1, payload.data.x", m.Contract, m.Field, m.Problems)
	}
	h = Stamp(h, failure("boom", t0.Add(time.Second), "events"), 2, "")
	if m := ParseMetadata(h); m.Contract != "" || m.Field != "" {
		t.Errorf("after a failure that named no field: contract %q, field %q, want neither", m.Contract, m.Field)
	}
	f.Field = "payload.data." + strings.Repeat("x", 10_000)
	if m := ParseMetadata(Stamp(nil, f, 1, ClassUndecodable)); len(m.Field) > 300 {
		t.Errorf("a 10 KB field name is stored as %d bytes", len(m.Field))
	}
}
