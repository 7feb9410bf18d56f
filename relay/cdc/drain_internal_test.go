package cdc

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/warrenmq/warren"
	"github.com/warrenmq/warren/internal/amqpx"
	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/internal/testenv/spanrecorder"
	"github.com/warrenmq/warren/outbox"
)

// The batches behind one that failed the session are only drained, not
// settled, but each publish span they started is ended: a copy that
// reached the broker has a consumer whose span names it as its parent.
// The exchange does not exist, so the broker closes the channel at the
// first batch and the second is drained.
func TestSpansOfDrainedBatchesEnd(t *testing.T) {
	t.Parallel()
	tp := spanrecorder.New() // records the spans it gives out
	r, err := New(Config{DatabaseURL: testenv.DatabaseURL(t), Exchange: testenv.Name(t, "missing"), TracerProvider: tp, PublishTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	conn, err := amqpx.Dial(ctx, testenv.AMQPURL(t), amqpx.DialOptions{Name: t.Name()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { amqpx.CloseConnection(conn, 5*time.Second) })
	pub, err := amqpx.NewPublisher(ctx, conn, 100)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pub.Close() })

	rows := func(batch int) []outbox.Row {
		out := make([]outbox.Row, 3)
		for i := range out {
			out[i] = outbox.Row{ID: int64(10*batch + i + 1), InsertedAt: time.Now(), Event: warren.Event{
				ID: fmt.Sprintf("b%d-%d", batch, i), Type: "workitem.created", Version: "1.0",
				EntityType: "issue", EntityID: "1", WorkspaceID: "w", CreatedAt: time.Now(),
				Payload: warren.Payload{Data: []byte(`{"id":1}`)},
			}}
		}
		return out
	}
	p := pipeline{sent: make(chan *inFlight, 2), room: make(chan struct{}, 2)}
	for batch := range 2 {
		p.room <- struct{}{}
		p.sent <- r.send(ctx, pub, rows(batch))
	}
	close(p.sent)
	sctx, fail := context.WithCancelCause(ctx)
	defer fail(nil)
	r.confirmLoop(sctx, pub, p, make(chan settlement, 8), fail)
	if context.Cause(sctx) == nil {
		t.Fatal("the session did not fail: the test's exchange exists?")
	}
	if started, ended := len(tp.Started()), len(tp.Ended()); started != 6 || ended != started {
		t.Errorf("%d publish spans started, %d ended; want 6 and 6", started, ended)
	}
}
