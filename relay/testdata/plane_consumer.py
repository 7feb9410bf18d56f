"""Read warren's relay output the way Plane's consumers read the event stream.

Usage: plane_consumer.py AMQP_URL QUEUE COUNT TIMEOUT_SECONDS

Consumes COUNT messages from QUEUE with pika, as Plane's webhook and
automation consumers do (json.loads of the body, then the fields by name),
checks every property and field they rely on has Plane's JSON type, acks
each message, and prints one JSON line per message with the values it
read. Exits 1, naming the problem, on the first message a Plane consumer
would choke on, or if COUNT messages do not arrive within TIMEOUT_SECONDS.
"""

import json
import sys
import time

import pika

STRING_FIELDS = ("event_id", "event_type", "entity_type", "entity_id", "workspace_id",
                 "initiator_type", "version", "publisher", "publisher_instance", "source")
NULLABLE_STRING_FIELDS = ("project_id", "initiator_id")
INTEGER_FIELDS = ("timestamp", "outbox_id")


def fail(msg):
    print("plane_consumer: " + msg, file=sys.stderr)
    sys.exit(1)


def check(properties, body):
    if properties.delivery_mode != 2:
        fail("delivery_mode %r, want 2 (persistent)" % properties.delivery_mode)
    if properties.content_type != "application/json":
        fail("content_type %r, want application/json" % properties.content_type)
    event = json.loads(body)
    for name in STRING_FIELDS:
        if not isinstance(event.get(name), str):
            fail("%s is %r, want a string, in %s" % (name, event.get(name), body))
    for name in NULLABLE_STRING_FIELDS:
        if name not in event or not (event[name] is None or isinstance(event[name], str)):
            fail("%s is %r, want a string or null, in %s" % (name, event.get(name), body))
    for name in INTEGER_FIELDS:
        value = event.get(name)
        if not isinstance(value, int) or isinstance(value, bool):
            fail("%s is %r, want an integer, in %s" % (name, value, body))
    payload = event.get("payload")
    if not isinstance(payload, dict) or "data" not in payload or "previous_attributes" not in payload:
        fail("payload %r lacks data or previous_attributes" % payload)
    # The automation consumer's routing decisions, as Plane makes them.
    event["_automation_handles"] = (event["event_type"].startswith(("workitem.", "issue."))
                                    and not event["initiator_type"].startswith("SYSTEM."))
    return event


def main():
    url, queue, count, timeout = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    connection = pika.BlockingConnection(pika.URLParameters(url))
    channel = connection.channel()
    deadline = time.monotonic() + timeout
    seen = 0
    for method, properties, body in channel.consume(queue, inactivity_timeout=1):
        if method is None:
            if time.monotonic() > deadline:
                fail("%d of %d messages arrived within %ss" % (seen, count, timeout))
            continue
        print(json.dumps(check(properties, body), sort_keys=True), flush=True)
        channel.basic_ack(method.delivery_tag)
        seen += 1
        if seen == count:
            break
    channel.cancel()
    connection.close()


if __name__ == "__main__":
    main()
