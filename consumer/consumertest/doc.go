// Package consumertest tells a test what a consumer would do with a
// message, without a broker: it runs a delivery (an event, its headers, the
// attempt it is) through a [consumer.BaseConsumer]'s middleware chain and
// handlers and returns the consumer's verdict — acked as done, skipped or
// duplicate; moved to which retry tier, with which headers; dead-lettered
// with which class and metadata; or requeued.
//
// The verdict comes from the code the consumer's workers run, not from a
// copy of the ack policy kept beside it: [Deliver] decodes the body,
// invokes the chain (turning a panic into a retry, as a worker does),
// classifies the outcome and picks the queue and headers exactly as the
// consumer does, and stops short of the publish and the ack. So a test of
// a handler's outcome cannot pass while the consumer would do something
// else.
//
// Build the consumer as the service does (consumer.New, Handle, Use);
// it needs no broker, and Run is never called:
//
//	c, _ := consumer.New(consumer.Config{Name: "billing"})
//	c.HandleFunc("invoice.", handleInvoice)
//	r := consumertest.Deliver(ctx, c, consumertest.Delivery{Event: ev, Attempt: 2})
//	// r.Disposition == consumer.Retried, r.Queue == "billing.retry.10s"
//
// A test with a real dedup store (Redis, Postgres) gives the store a
// [Space] of its own per run: the store outlives the run, and without one
// an event the last run delivered is a duplicate in this one.
//
// What is left out is what needs a broker: the confirm of the copy's
// publish, the ack, and a publish that fails (the consumer then requeues
// the message). The Observer, Stats and logs of the consumer are not
// touched.
package consumertest
