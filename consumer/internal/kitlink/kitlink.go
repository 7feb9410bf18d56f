// Package kitlink lets package consumertest run a delivery through a
// BaseConsumer's own decision code without that code becoming part of
// package consumer's API. Package consumer sets Evaluate when it is
// initialised; consumertest, which imports consumer, calls it.
package kitlink

import (
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Evaluate is, once package consumer is initialised, a
//
//	func(ctx context.Context, c *consumer.BaseConsumer, d amqp.Delivery) (consumer.Settlement, Move)
//
// that decodes d, runs it through c's middleware chain and handlers, and
// returns what c's ack policy decided, having done none of it. It is typed
// any because this package cannot name package consumer's types.
var Evaluate any

// Move is where the consumer would publish a copy of the delivery (for a
// retry, a deferral or a dead letter) and why.
type Move struct {
	Queue   string        // retry tier or DLQ; empty when the delivery is acked or requeued
	Delay   time.Duration // the retry tier's delay
	Headers amqp.Table    // the copy's headers
	Attempt int           // the attempt that was handled
	Err     error         // the handler's or the decoder's error
}
