// Package planeinterop holds no code: its test proves that the example
// consumers (examples/webhook and examples/automation) handle what Plane's
// own publisher sends, so a Plane consumer can be moved to warren while
// Plane keeps publishing.
//
// testdata/plane_publisher.py publishes with pika (Debian's python3-pika,
// which scripts/services.sh installs) as Plane's EventStreamPublisher does:
// Plane's envelope (the event fields, "timestamp" in integer Unix seconds,
// "version", "publisher", "publisher_instance", "source", "outbox_id"),
// serialised by json.dumps, to a durable fanout exchange, with Plane's
// properties (delivery_mode=2 only), with every property warren's relay
// sets, or with none at all. The test checks what each consumer did with
// every message: delivered, rule applied, skipped, or dead-lettered with
// its reason.
//
// The other direction, Plane's consumers reading what warren's relay
// publishes in Plane's format, is relay/plane_pika_test.go.
package planeinterop
