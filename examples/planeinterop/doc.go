// Package planeinterop holds no code: its test proves that the example
// consumers (examples/webhook and examples/automation) handle what Plane's
// own publisher sends, so a Plane consumer can be moved to warren while
// Plane keeps publishing.
//
// testdata/plane_publisher.py publishes with pika (Debian's python3-pika,
// which scripts/services.sh installs) what Plane's outbox poller publishes,
// as read from Plane's source (apps/api/plane/event_stream/publisher.py and
// models/outbox.py): Plane's body, its keys in Plane's order and a NULL
// initiator_id as the string "None", serialised by json.dumps, to a
// durable fanout exchange, with Plane's properties (persistent,
// application/json, content_encoding utf-8, a timestamp), with the
// properties warren's relay sets, or with none at all. The test checks
// what each consumer did with every message: delivered, rule applied,
// skipped, or dead-lettered with its reason.
//
// The other direction, Plane's consumers reading what warren's relay
// publishes in Plane's format, is relay/plane_pika_test.go.
package planeinterop
