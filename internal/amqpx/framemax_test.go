package amqpx_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/warrenmq/warren/internal/amqpx"
	"github.com/warrenmq/warren/internal/testenv/localrabbit"
)

// warren's size limits (the frame filter's, the room dlq.Fit keeps for a
// copy's record, the relays' MaxContentHeader) are set for a frame_max of
// 128 KiB. A broker that offers less (4096 is AMQP's minimum and a legal
// rabbitmq.conf value) made a consumer's dead letter of a legal message
// over the broker's limit: the connection closed at every attempt and the
// message never left the head of its queue (113 reconnects in 60 s), and a
// relay met the same row first in every session. Dial refuses such a
// broker, as a refusal no retry mends, saying what to set.
func TestDialRefusesABrokerWithASmallFrameMax(t *testing.T) {
	t.Parallel() // the only test of the binary on its shared private node (localrabbit.Shared)
	node := localrabbit.Shared(t)
	set := func(v int) error {
		return node.SetEnv(context.Background(), "frame_max", v)
	}
	if err := set(4096); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := set(131072); err != nil {
			t.Errorf("put frame_max back: %v", err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := amqpx.Dial(ctx, node.URL(), amqpx.DialOptions{Name: t.Name(), Timeout: 5 * time.Second})
	if err == nil {
		conn.Close()
		t.Fatal("Dial accepted a broker whose frame_max is 4096")
	}
	if !errors.Is(err, amqpx.ErrRefused) || !strings.Contains(err.Error(), "frame_max is 4096") {
		t.Fatalf("Dial: %v; want an ErrRefused naming the broker's frame_max", err)
	}
	if err := set(131072); err != nil {
		t.Fatal(err)
	}
	conn, err = amqpx.Dial(ctx, node.URL(), amqpx.DialOptions{Name: t.Name(), Timeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("Dial of the broker at its default frame_max: %v", err)
	}
	conn.Close()
}
