package consumer

import (
	"context"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/consumer/internal/kitlink"
)

// Package consumertest reports what a consumer would do with a delivery by
// calling the very code its workers run (evaluate and decide); only act,
// which publishes and acks, is left out.
func init() {
	kitlink.Evaluate = func(ctx context.Context, c *BaseConsumer, d amqp.Delivery) (Settlement, kitlink.Move) {
		v := c.evaluate(ctx, c.handler(), d)
		return v.Settlement, kitlink.Move{Queue: v.queue, Delay: v.delay, Headers: v.headers, Attempt: v.attempt, Err: v.err}
	}
}
