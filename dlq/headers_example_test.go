package dlq_test

import (
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/dlq"
)

func ExampleParseMetadata() {
	at := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	headers := dlq.Stamp(nil, dlq.Failure{
		Err: "POST https://hooks.example.com: 410 Gone", At: at,
		Queue: "webhook", Exchange: "plane.events", Consumer: "webhook", Host: "worker-1",
	}, 1, dlq.ClassPermanent)

	md := dlq.ParseMetadata(headers)
	fmt.Println(md.Class, md.Attempts, md.OriginQueue, md.LastFailure.Format(time.RFC3339))
	fmt.Println(md.Error)
	// Output:
	// permanent 1 webhook 2025-06-01T12:00:00Z
	// POST https://hooks.example.com: 410 Gone
}

// A producer's publish that claims a history (99 attempts, another queue
// as its origin) loses it; its own headers stay.
func ExampleStripHistory() {
	forged := amqp.Table{
		dlq.HeaderAttempts:    int32(99),
		dlq.HeaderOriginQueue: "billing",
		"x-death":             []any{},
		"traceparent":         "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
	}
	fmt.Println(dlq.StripHistory(forged))
	// Output:
	// map[traceparent:00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01]
}
