package dlqtool_test

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/dlq"
	"github.com/warrenmq/warren/dlqtool"
	"github.com/warrenmq/warren/internal/testenv"
)

// A DLQ holding messages whose headers amqp091-go refuses (here expired
// into it by the broker, as when no consumer took them in time) used to
// fail every tool at the first of them. The tools read it now: each such
// message shows dlq.HeaderUnreadable and the entries the client reads
// (x-death among them, when the table itself is not at fault), is
// exported, grouped, purged; and a message behind them is replayed.
func TestToolsReadADeadLetterQueueHoldingUnreadableHeaders(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	bad := f.top.ExpireUnreadable(t, f.conn)
	normal := f.top.Message(testenv.Dead{ID: "normal", Type: "workitem.updated", Class: dlq.ClassPermanent, Err: "boom", Attempts: 1})
	testenv.PublishInOrder(t, f.conn, f.top.DLQ, []amqp.Publishing{normal})

	peeked, err := f.q.Peek(ctx, dlqtool.PeekOptions{})
	if err != nil || len(peeked) != len(bad)+1 {
		t.Fatalf("peek: %d messages, %v", len(peeked), err)
	}
	for _, m := range peeked[:len(bad)] {
		want := bad[m.EventID]
		why, _ := m.Headers[dlq.HeaderUnreadable].(string)
		if !strings.Contains(why, want.Reason) || m.EventType != "workitem.created" || !bytes.Contains(m.Body, []byte(m.EventID)) {
			t.Errorf("%s: marker %q, type %q, body %s", m.EventID, why, m.EventType, m.Body)
		}
		// With x-death readable, the broker's record says why it died;
		// without, the marker does.
		wantClass := dlq.ClassUndecodable
		if want.Kept != nil {
			wantClass = dlq.ClassExpired
		}
		if m.Metadata.Class != wantClass {
			t.Errorf("%s: class %q, want %q (headers %v)", m.EventID, m.Metadata.Class, wantClass, m.Headers)
		}
	}
	st, err := f.q.Stats(ctx, dlqtool.StatsOptions{})
	if err != nil || st.Total != len(bad)+1 {
		t.Fatalf("stats: %+v, %v", st, err)
	}
	var out bytes.Buffer
	if n, err := f.q.Export(ctx, &out, dlqtool.ExportOptions{}); err != nil || n != len(bad)+1 {
		t.Fatalf("export: %d, %v", n, err)
	}
	exported, err := dlqtool.ReadMessages(&out)
	if err != nil || len(exported) != len(bad)+1 || exported[0].Headers[dlq.HeaderUnreadable] == nil {
		t.Fatalf("the export reads back as %d messages (%v), the first with headers %v", len(exported), err, exported[0].Headers)
	}

	res, err := f.q.Replay(ctx, dlqtool.ReplayOptions{Filter: dlqtool.Filter{EventIDs: []string{"normal"}}})
	if err != nil || res.Done != 1 {
		t.Fatalf("replay of the message behind them: %+v, %v", res, err)
	}
	res, err = f.q.Purge(ctx, dlqtool.PurgeOptions{})
	if err != nil || res.Done != len(bad) {
		t.Fatalf("purge: %+v, %v", res, err)
	}
	testenv.WaitFor(t, 60*time.Second, "the DLQ empty", func() bool { return f.depth(t, f.top.DLQ) == 0 })
	if got := ids(testenv.Drain(t, f.conn, f.top.Consumer)); !slices.Equal(got, []string{"normal"}) {
		t.Errorf("the consumer's queue holds %v, want the replayed message", got)
	}
}
