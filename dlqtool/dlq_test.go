package dlqtool_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/dlq"
	"github.com/warrenmq/warren/dlqtool"
	"github.com/warrenmq/warren/internal/testenv"
)

var (
	eventTypes = []string{"workitem.created", "workitem.updated", "cycle.created", "module.deleted"}
	classes    = []dlq.Class{dlq.ClassPermanent, dlq.ClassExhausted, dlq.ClassUndecodable, dlq.ClassUnhandled}
)

// mixed returns n dead messages cycling through the event types and the
// classes the consumer writes, with ids "m-0", "m-1", …
func mixed(top testenv.DeadLetterTopology, n int, at time.Time) []amqp.Publishing {
	out := make([]amqp.Publishing, n)
	for i := range out {
		d := testenv.Dead{
			ID: fmt.Sprintf("m-%d", i), Type: eventTypes[i%len(eventTypes)], Class: classes[i%3],
			Err: fmt.Sprintf("error %d", i%5), At: at, Attempts: 1 + i%3,
		}
		if i%7 == 0 {
			d.Class, d.Err, d.Body = dlq.ClassUndecodable, "invalid event: body is not JSON", []byte("not json {")
		}
		out[i] = top.Message(d)
	}
	return out
}

type fixture struct {
	top  testenv.DeadLetterTopology
	conn *amqp.Connection
	ch   *amqp.Channel
	q    *dlqtool.Queue
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	conn, ch, top := testenv.NewDeadLetterTopology(t)
	q, err := dlqtool.Open(context.Background(), conn, top.Consumer)
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{top: top, conn: conn, ch: ch, q: q}
}

func (f *fixture) depth(t *testing.T, queue string) int { return testenv.QueueDepth(t, f.ch, queue) }

// ids returns the message ids of deliveries, publishings or messages.
func ids[T amqp.Delivery | amqp.Publishing | dlqtool.Message](xs []T) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		switch v := any(x).(type) {
		case amqp.Delivery:
			out[i] = v.MessageId
		case amqp.Publishing:
			out[i] = v.MessageId
		case dlqtool.Message:
			out[i] = v.EventID
		}
	}
	return out
}

func TestOpen(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	for _, name := range []string{f.top.Consumer, f.top.DLQ} {
		q, err := dlqtool.Open(ctx, f.conn, name)
		if err != nil {
			t.Fatalf("Open(%q): %v", name, err)
		}
		if q.Name() != f.top.DLQ || q.Consumer() != f.top.Consumer {
			t.Errorf("Open(%q) = %s of %s, want %s of %s", name, q.Name(), q.Consumer(), f.top.DLQ, f.top.Consumer)
		}
	}
	_, err := dlqtool.Open(ctx, f.conn, f.top.Consumer+"-missing")
	if !errors.Is(err, dlqtool.ErrNoQueue) {
		t.Fatalf("Open of a missing queue: %v, want ErrNoQueue", err)
	}
	for _, bad := range []string{"", ".dlq", string(make([]byte, 300))} {
		if _, err := dlqtool.Open(ctx, f.conn, bad); err == nil {
			t.Errorf("Open(%.10q) succeeded", bad)
		}
	}
	// The connection survives the failed lookups.
	if _, err := f.q.Count(ctx); err != nil {
		t.Fatalf("Count after failed Opens: %v", err)
	}
}

// Every read (Peek, Stats, Export) leaves the queue exactly as it was: the
// same messages in the same order with the same content. The final check
// removes the messages with basic.get, a different mechanism from the
// reader under test.
func TestReadsLeaveQueueUnchanged(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	msgs := mixed(f.top, 300, time.Now().Add(-time.Hour))
	testenv.PublishInOrder(t, f.conn, f.top.DLQ, msgs)

	got, err := f.q.Peek(ctx, dlqtool.PeekOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ids(got), ids(msgs)) {
		t.Fatalf("Peek returned %d messages out of order or incomplete", len(got))
	}
	for i, m := range got {
		if m.Position != i {
			t.Fatalf("message %d has position %d", i, m.Position)
		}
	}
	first, err := f.q.Peek(ctx, dlqtool.PeekOptions{Limit: 10})
	if err != nil || len(first) != 10 || first[9].EventID != "m-9" {
		t.Fatalf("Peek limit 10: %d messages, %v", len(first), err)
	}
	filtered, err := f.q.Peek(ctx, dlqtool.PeekOptions{Limit: 3, Filter: dlqtool.Filter{TypePrefixes: []string{"cycle."}}})
	if err != nil || !slices.Equal(ids(filtered), []string{"m-2", "m-6", "m-10"}) {
		t.Fatalf("filtered Peek: %v, %v", ids(filtered), err)
	}
	if _, err := f.q.Stats(ctx, dlqtool.StatsOptions{}); err != nil {
		t.Fatal(err)
	}
	var export bytes.Buffer
	if n, err := f.q.Export(ctx, &export, dlqtool.ExportOptions{}); err != nil || n != 300 {
		t.Fatalf("Export: %d, %v", n, err)
	}
	// A scan cut short by its context leaves the queue as it was too.
	cctx, cancel := context.WithCancel(ctx)
	_, err = f.q.Peek(cctx, dlqtool.PeekOptions{Progress: func(p dlqtool.Progress) {
		if p.Scanned == 150 {
			cancel()
		}
	}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Peek: %v", err)
	}

	testenv.WaitFor(t, 60*time.Second, "every message back in the DLQ", func() bool { return f.depth(t, f.top.DLQ) == 300 })
	after := testenv.Drain(t, f.conn, f.top.DLQ)
	if !slices.Equal(ids(after), ids(msgs)) {
		t.Fatalf("queue order changed: %v…", ids(after)[:10])
	}
	for i, d := range after {
		want := msgs[i]
		if !bytes.Equal(d.Body, want.Body) || !reflect.DeepEqual(d.Headers, want.Headers) ||
			d.Type != want.Type || d.ContentType != want.ContentType || d.DeliveryMode != want.DeliveryMode || !d.Timestamp.Equal(want.Timestamp) {
			t.Fatalf("message %d changed:\n got %+v\nwant %+v", i, d.Headers, want.Headers)
		}
	}
}

func TestPeekDecodesMetadata(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	at := time.Date(2025, 3, 1, 10, 0, 0, 0, time.UTC)
	testenv.PublishInOrder(t, f.conn, f.top.DLQ, []amqp.Publishing{
		f.top.Message(testenv.Dead{ID: "p1", Type: "workitem.updated", Class: dlq.ClassPermanent, Err: "bad field", At: at, Attempts: 3}),
	})
	// Without message_id and type properties, both come from the body.
	bodyOnly := f.top.Message(testenv.Dead{ID: "b1", Type: "cycle.created", Class: dlq.ClassUnhandled, Err: "no handler", At: at})
	bodyOnly.MessageId, bodyOnly.Type = "", ""
	testenv.PublishInOrder(t, f.conn, f.top.DLQ, []amqp.Publishing{bodyOnly})
	f.top.Expire(t, f.conn, []amqp.Publishing{{MessageId: "x1", Type: "module.deleted", Body: []byte(`{}`)}})

	got, err := f.q.Peek(ctx, dlqtool.PeekOptions{})
	if err != nil || len(got) != 3 {
		t.Fatalf("Peek: %d messages, %v", len(got), err)
	}
	p, b, x := got[0], got[1], got[2]
	if p.EventID != "p1" || p.EventType != "workitem.updated" || p.Metadata.Class != dlq.ClassPermanent ||
		p.Metadata.Error != "bad field" || p.Metadata.Attempts != 3 || !p.Metadata.LastFailure.Equal(at) ||
		p.Metadata.OriginQueue != f.top.Consumer || p.Metadata.OriginExchange != f.top.Exchange ||
		p.Metadata.Consumer != f.top.Consumer || p.Origin() != f.top.Consumer {
		t.Errorf("stamped message decoded as %+v", p)
	}
	if b.EventID != "b1" || b.EventType != "cycle.created" {
		t.Errorf("body-only message: id %q type %q", b.EventID, b.EventType)
	}
	if x.Metadata.Class != dlq.ClassExpired || x.Origin() != f.top.Consumer || len(x.Metadata.Deaths) != 1 ||
		x.Metadata.Deaths[0].Reason != "expired" || x.Metadata.Deaths[0].Queue != f.top.Consumer {
		t.Errorf("expired message decoded as %+v", x.Metadata)
	}
}

func TestStatsGroups(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	msgs := mixed(f.top, 700, time.Now())
	testenv.PublishConfirmed(t, f.conn, f.top.DLQ, msgs)
	f.top.Expire(t, f.conn, []amqp.Publishing{{MessageId: "x1", Type: "workitem.created"}, {MessageId: "x2", Type: "label.created"}})

	want := map[string]map[string]int{"class": {}, "type": {}, "error": {}}
	for _, m := range msgs {
		md := dlq.ParseMetadata(m.Headers)
		want["class"][string(md.Class)]++
		want["type"][m.Type]++
		want["error"][dlq.Signature(md.Class, md.Error)]++
	}
	want["class"]["expired"] += 2
	want["type"]["workitem.created"]++
	want["type"]["label.created"]++
	want["error"][dlq.Signature(dlq.ClassExpired, "dead-lettered by the broker (expired) from queue "+f.top.Consumer)] += 2

	st, err := f.q.Stats(context.Background(), dlqtool.StatsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if st.Total != 702 {
		t.Fatalf("total %d, want 702", st.Total)
	}
	for name, groups := range map[string][]dlqtool.Group{"class": st.ByClass, "type": st.ByType, "error": st.ByError} {
		got := map[string]int{}
		for i, g := range groups {
			got[g.Key] = g.Count
			if i > 0 && g.Count > groups[i-1].Count {
				t.Errorf("%s groups not largest first: %v", name, groups)
			}
		}
		if !reflect.DeepEqual(got, want[name]) {
			t.Errorf("by %s: got %v, want %v", name, got, want[name])
		}
	}

	st, err = f.q.Stats(context.Background(), dlqtool.StatsOptions{Filter: dlqtool.Filter{Classes: []dlq.Class{dlq.ClassExpired}}})
	if err != nil || st.Total != 2 || len(st.ByClass) != 1 {
		t.Fatalf("filtered stats: %+v, %v", st, err)
	}
}

// A filtered replay moves exactly the matching messages to the queue each
// came from, through the default exchange (another queue on the consumer's
// fanout exchange gets nothing), resets their failure record and counts the
// replay; the rest stay in the DLQ in their order.
func TestReplayFiltered(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	sibling := testenv.Name(t, "sibling")
	testenv.CleanupQueues(t, sibling)
	if _, err := f.ch.QueueDeclare(sibling, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := f.ch.QueueBind(sibling, "", f.top.Exchange, false, nil); err != nil {
		t.Fatal(err)
	}
	msgs := mixed(f.top, 400, time.Now().Add(-time.Hour))
	testenv.PublishInOrder(t, f.conn, f.top.DLQ, msgs)

	filter := dlqtool.Filter{TypePrefixes: []string{"workitem."}, Classes: []dlq.Class{dlq.ClassPermanent, dlq.ClassExhausted}}
	var match, rest []string
	now := time.Now()
	for i, p := range msgs {
		m := messageOf(i, p)
		if filter.Match(&m, now) {
			match = append(match, p.MessageId)
		} else {
			rest = append(rest, p.MessageId)
		}
	}

	res, err := f.q.Replay(ctx, dlqtool.ReplayOptions{Filter: filter})
	if err != nil {
		t.Fatal(err)
	}
	if res.Done != len(match) || res.Matched != len(match) || res.Scanned != 400 || res.Queues[f.top.Consumer] != len(match) {
		t.Fatalf("result %+v, want %d replayed of 400", res, len(match))
	}
	if n := f.depth(t, sibling); n != 0 {
		t.Fatalf("the sibling queue on the fanout exchange got %d messages", n)
	}
	replayed := testenv.Drain(t, f.conn, f.top.Consumer)
	if !slices.Equal(ids(replayed), match) {
		t.Fatalf("origin queue holds %d messages, want the %d matching in order", len(replayed), len(match))
	}
	left := testenv.Drain(t, f.conn, f.top.DLQ)
	if !slices.Equal(ids(left), rest) {
		t.Fatalf("DLQ holds %d messages, want the %d others in order", len(left), len(rest))
	}

	byID := map[string]amqp.Publishing{}
	for _, p := range msgs {
		byID[p.MessageId] = p
	}
	for _, d := range replayed {
		orig := byID[d.MessageId]
		md := dlq.ParseMetadata(d.Headers)
		if md.Class != "" || md.Error != "" || md.Attempts != 0 || !md.FirstFailure.IsZero() || md.Replays != 1 {
			t.Fatalf("replayed message keeps its failure record: %+v", md)
		}
		if md.OriginQueue != f.top.Consumer || md.OriginExchange != f.top.Exchange {
			t.Fatalf("replayed message lost its origin: %+v", md)
		}
		if !bytes.Equal(d.Body, orig.Body) || d.Type != orig.Type || d.ContentType != orig.ContentType ||
			d.DeliveryMode != orig.DeliveryMode || !d.Timestamp.Equal(orig.Timestamp) || d.Headers["x-warren-initiator-type"] != "USER" {
			t.Fatalf("replayed message changed: %+v", d)
		}
	}

	// Replaying a replayed message counts again.
	testenv.PublishInOrder(t, f.conn, f.top.DLQ, []amqp.Publishing{testenv.AsPublishing(replayed[0])})
	if _, err := f.q.Replay(ctx, dlqtool.ReplayOptions{}); err != nil {
		t.Fatal(err)
	}
	again := testenv.Drain(t, f.conn, f.top.Consumer)
	if len(again) != 1 || dlq.ParseMetadata(again[0].Headers).Replays != 2 {
		t.Fatalf("second replay: %d messages, replays %v", len(again), again[0].Headers[dlq.HeaderReplays])
	}
}

func messageOf(pos int, p amqp.Publishing) dlqtool.Message {
	var m dlqtool.Message
	line, err := dlqtool.Message{Position: pos, Publishing: p}.MarshalJSON()
	if err != nil {
		panic(err)
	}
	if err := m.UnmarshalJSON(line); err != nil {
		panic(err)
	}
	return m
}

func TestReplayLimitTargetAndDryRun(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	msgs := mixed(f.top, 50, time.Now())
	testenv.PublishInOrder(t, f.conn, f.top.DLQ, msgs)
	other := testenv.Name(t, "other")
	testenv.CleanupQueues(t, other)
	if _, err := f.ch.QueueDeclare(other, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}

	dry, err := f.q.Replay(ctx, dlqtool.ReplayOptions{DryRun: true, Limit: 20})
	if err != nil || !dry.DryRun || dry.Matched != 20 || dry.Done != 0 || dry.Queues[f.top.Consumer] != 20 {
		t.Fatalf("dry run: %+v, %v", dry, err)
	}
	testenv.WaitFor(t, 60*time.Second, "DLQ back to 50", func() bool { return f.depth(t, f.top.DLQ) == 50 })
	if n := f.depth(t, f.top.Consumer); n != 0 {
		t.Fatalf("dry run published %d messages", n)
	}

	res, err := f.q.Replay(ctx, dlqtool.ReplayOptions{Limit: 5, To: other})
	if err != nil || res.Done != 5 || res.Queues[other] != 5 {
		t.Fatalf("replay to %s: %+v, %v", other, res, err)
	}
	if got := ids(testenv.Drain(t, f.conn, other)); !slices.Equal(got, ids(msgs[:5])) {
		t.Fatalf("target got %v", got)
	}
	testenv.WaitFor(t, 60*time.Second, "DLQ at 45", func() bool { return f.depth(t, f.top.DLQ) == 45 })
	if n := f.depth(t, f.top.Consumer); n != 0 {
		t.Fatalf("origin queue got %d messages from a targeted replay", n)
	}

	if _, err := f.q.Replay(ctx, dlqtool.ReplayOptions{To: f.top.DLQ}); err == nil {
		t.Fatal("replaying the DLQ into itself succeeded")
	}
	if _, err := f.q.Replay(ctx, dlqtool.ReplayOptions{To: other + "-missing"}); !errors.Is(err, dlqtool.ErrNoQueue) {
		t.Fatalf("replay to a missing queue: %v", err)
	}
	if _, err := f.q.Replay(ctx, dlqtool.ReplayOptions{Filter: dlqtool.Filter{Classes: []dlq.Class{"bogus"}}}); !errors.Is(err, dlqtool.ErrBadFilter) {
		t.Fatalf("bad class: %v", err)
	}
}

// A replay sends every message to the queue its DLQ belongs to, whatever
// origin queue its headers name: a producer can forge those headers, and a
// replay publishes with the operator's rights. A crafted dead letter naming
// another consumer's queue must not reach that queue; the replay counts it.
// When the DLQ's own queue is gone, the replay stops before moving anything.
func TestReplayGoesToTheQueueTheDLQBelongsTo(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	victim := testenv.Name(t, "victim")
	testenv.CleanupQueues(t, victim)
	if _, err := f.ch.QueueDeclare(victim, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	good := f.top.Message(testenv.Dead{ID: "good", Type: "workitem.created", Class: dlq.ClassPermanent, Err: "x"})
	forged := f.top.Message(testenv.Dead{ID: "forged", Type: "workitem.created", Class: dlq.ClassPermanent, Err: "x"})
	forged.Headers[dlq.HeaderOriginQueue] = victim
	// Dead-lettered by the broker, as far as its (forged) x-death says.
	brokerForged := amqp.Publishing{MessageId: "broker-forged", Body: []byte("{}"), Headers: amqp.Table{
		"x-death": []any{amqp.Table{"queue": victim, "reason": "rejected", "count": int64(1)}},
	}}
	none := amqp.Publishing{MessageId: "none", Body: []byte("{}")}
	testenv.PublishInOrder(t, f.conn, f.top.DLQ, []amqp.Publishing{good, forged, brokerForged, none})

	dry, err := f.q.Replay(ctx, dlqtool.ReplayOptions{DryRun: true})
	if err != nil || dry.Matched != 4 || dry.ForeignOrigin != 2 || !reflect.DeepEqual(dry.Queues, map[string]int{f.top.Consumer: 4}) {
		t.Fatalf("dry run: %+v, %v; want 4 to %s, 2 naming another origin", dry, err, f.top.Consumer)
	}
	res, err := f.q.Replay(ctx, dlqtool.ReplayOptions{})
	if err != nil || res.Done != 4 || res.ForeignOrigin != 2 || !reflect.DeepEqual(res.Queues, map[string]int{f.top.Consumer: 4}) {
		t.Fatalf("replay: %+v, %v; want 4 to %s, 2 naming another origin", res, err, f.top.Consumer)
	}
	if n := f.depth(t, victim); n != 0 {
		t.Errorf("the queue the forged headers name holds %d messages, want none", n)
	}
	home := testenv.Drain(t, f.conn, f.top.Consumer)
	if got := ids(home); !slices.Equal(got, []string{"good", "forged", "broker-forged", "none"}) {
		t.Fatalf("%s holds %v", f.top.Consumer, got)
	}
	for _, d := range home {
		if o := dlq.ParseMetadata(d.Headers).OriginQueue; o != f.top.Consumer {
			t.Errorf("%s replayed with origin queue %q, want %q", d.MessageId, o, f.top.Consumer)
		}
	}

	// The operator names another queue: that is where they go, and
	// nothing is counted as redirected.
	testenv.PublishInOrder(t, f.conn, f.top.DLQ, []amqp.Publishing{forged})
	res, err = f.q.Replay(ctx, dlqtool.ReplayOptions{To: victim})
	if err != nil || res.Done != 1 || res.ForeignOrigin != 0 || res.Queues[victim] != 1 {
		t.Fatalf("replay --to: %+v, %v", res, err)
	}

	// The DLQ's own queue is gone: nothing moves.
	testenv.PublishInOrder(t, f.conn, f.top.DLQ, []amqp.Publishing{good, forged})
	if _, err := f.ch.QueueDelete(f.top.Consumer, false, false, false); err != nil {
		t.Fatal(err)
	}
	res, err = f.q.Replay(ctx, dlqtool.ReplayOptions{})
	if !errors.Is(err, dlqtool.ErrNoQueue) || res.Done != 0 {
		t.Fatalf("replay without its queue: %+v, %v; want nothing done and ErrNoQueue", res, err)
	}
	t.Logf("error: %v", err)
	testenv.WaitFor(t, 60*time.Second, "DLQ at 2", func() bool { return f.depth(t, f.top.DLQ) == 2 })
}

// Cancelling a replay midway loses nothing: every message is in the DLQ or
// the origin queue, and (since the message in flight is finished before
// stopping) in exactly one of them.
func TestReplayInterrupted(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	msgs := mixed(f.top, 200, time.Now())
	testenv.PublishConfirmed(t, f.conn, f.top.DLQ, msgs)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	res, err := f.q.Replay(ctx, dlqtool.ReplayOptions{Rate: 1000, Progress: func(p dlqtool.Progress) {
		if p.Done == 100 {
			cancel()
		}
	}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted replay returned %v", err)
	}
	if res.Done != 100 {
		t.Fatalf("replayed %d before stopping, want 100", res.Done)
	}
	testenv.WaitFor(t, 60*time.Second, "the rest back in the DLQ", func() bool { return f.depth(t, f.top.DLQ) == 100 })
	origin, dead := testenv.Drain(t, f.conn, f.top.Consumer), testenv.Drain(t, f.conn, f.top.DLQ)
	all := append(ids(origin), ids(dead)...)
	slices.Sort(all)
	want := ids(msgs)
	slices.Sort(want)
	if !slices.Equal(all, want) {
		t.Fatalf("origin %d + DLQ %d messages are not the 200 published", len(origin), len(dead))
	}
}

// RabbitMQ drops a message it would dead-letter into a queue its x-death
// already names (a "cycle") unless a rejection was involved. A replayed
// expired message must therefore not carry its x-death, or the consumer's
// first retry through a retry tier (which dead-letters back to the origin
// queue) would silently destroy it.
func TestReplayedExpiredMessageSurvivesRetryTier(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	retry := f.top.Consumer + ".retry.1s"
	testenv.CleanupQueues(t, retry)
	if _, err := f.ch.QueueDeclare(retry, true, false, false, false, amqp.Table{
		"x-message-ttl": int32(20), "x-dead-letter-exchange": "", "x-dead-letter-routing-key": f.top.Consumer,
	}); err != nil {
		t.Fatal(err)
	}
	f.top.Expire(t, f.conn, []amqp.Publishing{{MessageId: "e1", Type: "workitem.updated", Body: []byte(`{"event_id":"e1"}`)}})
	if _, err := f.q.Replay(ctx, dlqtool.ReplayOptions{}); err != nil {
		t.Fatal(err)
	}
	back := testenv.Drain(t, f.conn, f.top.Consumer)
	if len(back) != 1 {
		t.Fatalf("origin queue holds %d messages after replay", len(back))
	}
	if _, ok := back[0].Headers["x-death"]; ok {
		t.Fatalf("replayed message still carries x-death: %v", back[0].Headers)
	}
	// The consumer fails it transiently and sends it to a retry tier with
	// its headers.
	testenv.PublishInOrder(t, f.conn, retry, []amqp.Publishing{testenv.AsPublishing(back[0])})
	testenv.WaitFor(t, 60*time.Second, "the retried message back in the origin queue", func() bool {
		return f.depth(t, f.top.Consumer) == 1
	})
}

func TestPurgeFiltered(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	msgs := mixed(f.top, 100, time.Now().Add(-2*time.Hour))
	testenv.PublishInOrder(t, f.conn, f.top.DLQ, msgs)
	filter := dlqtool.Filter{Classes: []dlq.Class{dlq.ClassUndecodable}}
	var rest []string
	for i, p := range msgs {
		if m := messageOf(i, p); !filter.Match(&m, time.Now()) {
			rest = append(rest, p.MessageId)
		}
	}
	dry, err := f.q.Purge(ctx, dlqtool.PurgeOptions{Filter: filter, DryRun: true})
	if err != nil || dry.Matched != 100-len(rest) || dry.Done != 0 {
		t.Fatalf("dry purge: %+v, %v", dry, err)
	}
	res, err := f.q.Purge(ctx, dlqtool.PurgeOptions{Filter: filter})
	if err != nil || res.Done != 100-len(rest) {
		t.Fatalf("purge: %+v, %v", res, err)
	}
	// Ages: everything died two hours ago.
	if res, err := f.q.Purge(ctx, dlqtool.PurgeOptions{Filter: dlqtool.Filter{NewerThan: time.Hour}}); err != nil || res.Done != 0 {
		t.Fatalf("purge of messages newer than 1h: %+v, %v", res, err)
	}
	testenv.WaitFor(t, 60*time.Second, "DLQ settled", func() bool { return f.depth(t, f.top.DLQ) == len(rest) })
	if got := ids(testenv.Drain(t, f.conn, f.top.DLQ)); !slices.Equal(got, rest) {
		t.Fatalf("DLQ after purge holds %d messages, want the %d others in order", len(got), len(rest))
	}
}

// Export then import reproduces every message exactly: body (text and
// binary), every property, and headers of every AMQP type, including the
// broker's own x-death.
func TestExportImportRoundTrip(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	odd := f.top.Message(testenv.Dead{ID: "odd", Type: "workitem.updated", Class: dlq.ClassExhausted, Err: "boom", Attempts: 5})
	for k, v := range allTypes() {
		odd.Headers[k] = v
	}
	odd.Body = []byte{0xff, 0x00, 0xfe, 'x'}
	odd.ContentType, odd.ContentEncoding, odd.Priority = "application/octet-stream", "gzip", 7
	odd.CorrelationId, odd.ReplyTo, odd.AppId = "corr", "reply.q", "tests"
	testenv.PublishInOrder(t, f.conn, f.top.DLQ, append(mixed(f.top, 20, time.Now()), odd))
	f.top.Expire(t, f.conn, []amqp.Publishing{{MessageId: "x1", Type: "module.deleted", Body: []byte("{}"), Headers: amqp.Table{"k": int16(2)}}})

	var buf bytes.Buffer
	n, err := f.q.Export(ctx, &buf, dlqtool.ExportOptions{})
	if err != nil || n != 22 {
		t.Fatalf("export: %d, %v", n, err)
	}
	read, err := dlqtool.ReadMessages(bytes.NewReader(buf.Bytes()))
	if err != nil || len(read) != 22 {
		t.Fatalf("read back: %d, %v", len(read), err)
	}

	other := testenv.DeclareDeadLetterTopology(t, f.ch)
	q2, err := dlqtool.Open(ctx, f.conn, other.DLQ)
	if err != nil {
		t.Fatal(err)
	}
	// The messages name their own consumer's queue as their origin, not
	// other's: the import into other's DLQ must be asked for by name.
	res, err := q2.Import(ctx, read, dlqtool.ImportOptions{})
	if !errors.Is(err, dlqtool.ErrForeignOrigin) || res.Done != 0 {
		t.Fatalf("import into another consumer's DLQ without --to: %+v, %v; want ErrForeignOrigin and nothing done", res, err)
	}
	t.Logf("error: %v", err)
	if n := f.depth(t, other.DLQ); n != 0 {
		t.Fatalf("a refused import published %d messages", n)
	}
	res, err = q2.Import(ctx, read, dlqtool.ImportOptions{To: other.DLQ})
	if err != nil || res.Done != 22 {
		t.Fatalf("import: %+v, %v", res, err)
	}
	orig, copied := testenv.Drain(t, f.conn, f.top.DLQ), testenv.Drain(t, f.conn, other.DLQ)
	if len(orig) != 22 || len(copied) != 22 {
		t.Fatalf("%d originals, %d copies", len(orig), len(copied))
	}
	for i := range orig {
		a, b := orig[i], copied[i]
		if !reflect.DeepEqual(testenv.AsPublishing(a), testenv.AsPublishing(b)) {
			t.Fatalf("message %d differs after export and import:\n got %#v\nwant %#v", i, testenv.AsPublishing(b), testenv.AsPublishing(a))
		}
	}
	if _, ok := copied[21].Headers["x-death"]; !ok {
		t.Fatal("x-death lost in the round trip")
	}
}

// Imported into a queue that is not a dead-letter queue (`import --to`,
// typically the origin queue), a message loses every header RabbitMQ wrote
// when it dead-lettered it: with an x-death naming its origin queue, the
// broker would drop it on the consumer's first retry. The broker's death is
// kept in warren's first-death headers. Imported into a dead-letter queue,
// where history belongs, the message keeps them all.
func TestImportStripsBrokerDeathsOutsideDeadLetterQueues(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	f.top.Expire(t, f.conn, []amqp.Publishing{{MessageId: "x1", Type: "workitem.updated", Body: []byte(`{"event_id":"x1"}`), Headers: amqp.Table{"keep": "me"}}})
	var file bytes.Buffer
	if _, err := f.q.Export(ctx, &file, dlqtool.ExportOptions{}); err != nil {
		t.Fatal(err)
	}
	msgs, err := dlqtool.ReadMessages(&file)
	if err != nil {
		t.Fatal(err)
	}
	dead := testenv.Drain(t, f.conn, f.top.DLQ)
	if len(dead) != 1 {
		t.Fatalf("DLQ held %d messages, want the one that expired", len(dead))
	}
	md := dlq.ParseMetadata(dead[0].Headers)
	if len(md.Deaths) != 1 || dead[0].Headers["x-first-death-queue"] != f.top.Consumer {
		t.Fatalf("the broker did not record the expiry as expected: %v", dead[0].Headers)
	}

	if _, err := f.q.Import(ctx, msgs, dlqtool.ImportOptions{To: f.top.Consumer}); err != nil {
		t.Fatal(err)
	}
	back := testenv.Drain(t, f.conn, f.top.Consumer)
	if len(back) != 1 {
		t.Fatalf("origin queue holds %d messages after the import, want 1", len(back))
	}
	for name := range back[0].Headers {
		if name == "x-death" || strings.HasPrefix(name, "x-first-death-") || strings.HasPrefix(name, "x-last-death-") {
			t.Errorf("imported into %s, the message keeps %s", f.top.Consumer, name)
		}
	}
	got := dlq.ParseMetadata(back[0].Headers)
	if want := (dlq.Death{Queue: f.top.Consumer, Reason: "expired", Time: md.Deaths[0].Time}); got.FirstDeath.Queue != want.Queue ||
		got.FirstDeath.Reason != want.Reason || !got.FirstDeath.Time.Equal(want.Time) {
		t.Errorf("first death %+v, want %+v", got.FirstDeath, want)
	}
	if back[0].Headers["keep"] != "me" || back[0].MessageId != "x1" {
		t.Errorf("the producer's headers or properties changed: %v", back[0].Headers)
	}

	if _, err := f.q.Import(ctx, msgs, dlqtool.ImportOptions{}); err != nil {
		t.Fatal(err)
	}
	again := testenv.Drain(t, f.conn, f.top.DLQ)
	if len(again) != 1 || !reflect.DeepEqual(testenv.AsPublishing(again[0]), testenv.AsPublishing(dead[0])) {
		t.Fatalf("imported back into the DLQ, the message differs:\n got %v\nwant %v", again, dead)
	}
}

func allTypes() amqp.Table {
	return amqp.Table{
		"i8": int8(-3), "u8": uint8(200), "i16": int16(-300), "u16": uint16(60000), "i32": int32(-70000),
		"u32": uint32(4000000000), "i64": int64(-1 << 40), "f32": float32(1.25), "f64": 2.5e-300,
		"dec": amqp.Decimal{Scale: 2, Value: 12345}, "str": "text ✓", "notutf8": "\xff\xfe",
		"arr": []any{"x", int32(1), amqp.Table{"k": "v"}, []any{}}, "ts": time.Unix(1700000000, 0),
		"tbl": amqp.Table{"n": amqp.Table{"z": true}}, "bin": []byte{0, 1, 255}, "void": nil, "yes": true,
	}
}

// A damaged export is refused whole: nothing is published.
func TestImportRefusesDamagedFile(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	testenv.PublishInOrder(t, f.conn, f.top.DLQ, mixed(f.top, 3, time.Now()))
	var buf bytes.Buffer
	if _, err := f.q.Export(ctx, &buf, dlqtool.ExportOptions{}); err != nil {
		t.Fatal(err)
	}
	damaged := append(buf.Bytes(), []byte(`{"properties":{},"headers":{"n":{"type":"int8","value":300}},"body":""}`+"\n")...)
	_, err := dlqtool.ReadMessages(bytes.NewReader(damaged))
	if !errors.Is(err, dlqtool.ErrBadExport) {
		t.Fatalf("damaged export read as %v", err)
	}
	t.Logf("error: %v", err)
}

// When the broker refuses the copy, the original stays in the DLQ: the
// removal waits for the confirm.
func TestReplayKeepsMessageWhenPublishFails(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	full := testenv.Name(t, "full")
	testenv.CleanupQueues(t, full)
	if _, err := f.ch.QueueDeclare(full, true, false, false, false, amqp.Table{"x-max-length": int32(0), "x-overflow": "reject-publish"}); err != nil {
		t.Fatal(err)
	}
	testenv.PublishInOrder(t, f.conn, f.top.DLQ, mixed(f.top, 3, time.Now()))
	res, err := f.q.Replay(context.Background(), dlqtool.ReplayOptions{To: full})
	if err == nil || res.Done != 0 {
		t.Fatalf("replay into a queue that rejects publishes: %+v, %v", res, err)
	}
	t.Logf("error: %v", err)
	testenv.WaitFor(t, 60*time.Second, "all 3 still in the DLQ", func() bool { return f.depth(t, f.top.DLQ) == 3 })
}

// TestScanSeesMessagesStillOnTheirWay reads a queue while the scan asks the
// broker what is left after every delivery. The broker counts a message it
// has already sent to the scan as unacknowledged, not ready, so "none
// ready" comes long before the scan has read them all; a scan that ended
// there returned part of the queue, with no error (seen under load as a
// peek of 14 out of 250 dead letters).
func TestScanSeesMessagesStillOnTheirWay(t *testing.T) {
	// Serial: sets the package's idleWait, which every scan reads.
	defer dlqtool.SetIdleWait(time.Nanosecond)()
	f := newFixture(t)
	ctx := context.Background()
	msgs := mixed(f.top, 2000, time.Now().Add(-time.Hour))
	testenv.PublishInOrder(t, f.conn, f.top.DLQ, msgs)

	for round := range 3 {
		got, err := f.q.Peek(ctx, dlqtool.PeekOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(ids(got), ids(msgs)) {
			t.Fatalf("round %d: Peek returned %d of %d messages", round, len(got), len(msgs))
		}
		testenv.WaitFor(t, 60*time.Second, "every message back in the DLQ", func() bool { return f.depth(t, f.top.DLQ) == len(msgs) })
	}
	var export bytes.Buffer
	if n, err := f.q.Export(ctx, &export, dlqtool.ExportOptions{}); err != nil || n != len(msgs) {
		t.Fatalf("Export: %d of %d, %v", n, len(msgs), err)
	}
}

// On quorum queues, which a consumer with QueueType quorum declares, reads
// leave the DLQ as it was, a read right after another sees every message
// the first handed back (a quorum queue counts them as ready again a moment
// after the channel's close), and replay moves exactly the dead messages
// back, in order.
func TestQuorumDeadLetterQueue(t *testing.T) {
	t.Parallel()
	conn := testenv.AMQPConn(t)
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	top := testenv.DeclareDeadLetterTopologyOfType(t, ch, "quorum")
	ctx := context.Background()
	q, err := dlqtool.Open(ctx, conn, top.Consumer)
	if err != nil {
		t.Fatal(err)
	}
	msgs := mixed(top, 100, time.Now().Add(-time.Hour))
	testenv.PublishInOrder(t, conn, top.DLQ, msgs)
	for i := range 2 {
		got, err := q.Peek(ctx, dlqtool.PeekOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(ids(got), ids(msgs)) {
			t.Fatalf("Peek %d of a quorum DLQ: %d messages, out of order or incomplete: %v…", i+1, len(got), ids(got)[:min(10, len(got))])
		}
	}
	testenv.WaitFor(t, 60*time.Second, "every message back in the DLQ", func() bool { return testenv.QueueDepth(t, ch, top.DLQ) == 100 })
	res, err := q.Replay(ctx, dlqtool.ReplayOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Done != 100 {
		t.Fatalf("replayed %+v, want 100", res)
	}
	replayed := testenv.Drain(t, conn, top.Consumer)
	if !slices.Equal(ids(replayed), ids(msgs)) {
		t.Fatalf("origin queue holds %d messages, want the 100 in order", len(replayed))
	}
	if n := testenv.QueueDepth(t, ch, top.DLQ); n != 0 {
		t.Fatalf("%d messages left in the DLQ", n)
	}
}

// syncFails is an archive whose Sync fails, as a full disk's would.
type syncFails struct{ bytes.Buffer }

func (*syncFails) Sync() error { return errors.New("no space left on device") }

// A purge whose archive cannot be synced deletes nothing: the messages are
// written, then synced, and deleted only after that succeeded.
func TestPurgeArchiveSyncFailureDeletesNothing(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	testenv.PublishConfirmed(t, f.conn, f.top.DLQ, mixed(f.top, 50, time.Now()))
	var archive syncFails
	res, err := f.q.Purge(context.Background(), dlqtool.PurgeOptions{Archive: &archive})
	if err == nil || res.Done != 0 || !strings.Contains(err.Error(), "nothing was purged") {
		t.Fatalf("purge with a failing archive: %+v, %v", res, err)
	}
	if n := bytes.Count(archive.Bytes(), []byte("\n")); n != 50 {
		t.Fatalf("archive got %d lines, want 50", n)
	}
	testenv.WaitFor(t, 30*time.Second, "all 50 back", func() bool { return testenv.QueueDepth(t, f.ch, f.top.DLQ) == 50 })
}

// A quorum queue hands every message back with x-delivery-count one
// higher after each read. Fingerprints taken by a dry run (as `warren dlq
// replay` / `purge` and the console take them when they ask their
// question) still select those messages after more reads.
func TestFingerprintsSurviveReadsOfAQuorumDLQ(t *testing.T) {
	t.Parallel()
	conn := testenv.AMQPConn(t)
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	top := testenv.DeclareDeadLetterTopologyOfType(t, ch, "quorum")
	testenv.PublishInOrder(t, conn, top.DLQ, mixed(top, 3, time.Now().Add(-time.Hour)))
	q, err := dlqtool.Open(t.Context(), conn, top.DLQ)
	if err != nil {
		t.Fatal(err)
	}
	var fps []string
	if _, err := q.Purge(t.Context(), dlqtool.PurgeOptions{DryRun: true, OnMatch: func(m *dlqtool.Message) { fps = append(fps, m.Fingerprint()) }}); err != nil {
		t.Fatal(err)
	}
	msgs, err := q.Peek(t.Context(), dlqtool.PeekOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("headers after two reads: x-delivery-count=%v", msgs[0].Headers["x-delivery-count"])
	var buf strings.Builder
	n, err := q.Export(t.Context(), &buf, dlqtool.ExportOptions{Filter: dlqtool.Filter{Fingerprints: fps}, Limit: len(fps)})
	if err != nil || n != 3 {
		t.Errorf("export of the 3 messages a dry run counted exported %d (err %v)", n, err)
	}
}

// Peek with Each hands each matching message to it, up to Limit, and
// keeps none itself: what a reader keeps of a queue (a page keeps no
// bodies) is all a scan costs it in memory.
func TestPeekEachKeepsNothing(t *testing.T) {
	t.Parallel()
	conn, _, top := testenv.NewDeadLetterTopology(t)
	testenv.PublishInOrder(t, conn, top.DLQ, mixed(top, 10, time.Now()))
	q, err := dlqtool.Open(t.Context(), conn, top.DLQ)
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	got, err := q.Peek(t.Context(), dlqtool.PeekOptions{Limit: 4, Each: func(m *dlqtool.Message) { seen = append(seen, m.EventID) }})
	if err != nil || len(got) != 0 || !slices.Equal(seen, []string{"m-0", "m-1", "m-2", "m-3"}) {
		t.Errorf("Peek with Each: returned %d, handed %v (err %v); want none returned, m-0…m-3 handed", len(got), seen, err)
	}
}
