package dlq_test

import (
	"fmt"
	"time"

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
