"""Publish Plane messages the way Plane's EventStreamPublisher does.

Usage: plane_publisher.py AMQP_URL EXCHANGE < messages.jsonl

Each input line is an object {"properties": KIND, "outbox_id": N, "event": {...}}:
the event fields of one outbox row (event_id, event_type, entity_type,
entity_id, workspace_id, project_id, initiator_id, initiator_type, payload)
and the row's id. The script wraps the event in Plane's envelope (top-level
"timestamp" in integer Unix seconds, "version", "publisher",
"publisher_instance", "source", "outbox_id"), serialises it with json.dumps
as Plane does, and publishes it with pika to EXCHANGE, which it declares as
Plane does: a durable fanout exchange (Plane's is plane.event_stream).

KIND says which AMQP properties the message carries:

  plane  delivery_mode=2 and nothing else: what Plane's publisher sets
  full   also content_type, message_id (= event_id), type (= event_type)
         and timestamp, the properties warren's relay sets
  none   no BasicProperties at all: no content type, no message id, no
         type, not persistent

For every message published it prints one line, {"properties": KIND,
"body": BODY}, BODY being the exact text published, so the caller can
compare what its consumers received byte for byte. Exits 1 with the reason
on the first message the broker refuses.

Unlike Plane's publisher (mandatory=False, no publisher confirms), this one
publishes mandatory with confirms, so that a message no queue takes fails
the caller's test instead of vanishing. That changes nothing in the message.
"""

import json
import socket
import sys
import time

import pika

ENVELOPE = {"version": "1.0", "publisher": "plane-outbox-poller", "source": "plane"}


def envelope(event, outbox_id):
    body = dict(event)
    body["timestamp"] = int(time.time())
    for name, value in ENVELOPE.items():
        body.setdefault(name, value)
    body["publisher_instance"] = socket.gethostname()
    body["outbox_id"] = outbox_id
    return body


def properties(kind, body):
    if kind == "none":
        return None
    if kind == "plane":
        return pika.BasicProperties(delivery_mode=2)
    if kind == "full":
        return pika.BasicProperties(delivery_mode=2, content_type="application/json",
                                    message_id=body.get("event_id"), type=body.get("event_type"),
                                    timestamp=body["timestamp"])
    raise ValueError("unknown properties kind %r: want plane, full or none" % kind)


def main():
    url, exchange = sys.argv[1], sys.argv[2]
    connection = pika.BlockingConnection(pika.URLParameters(url))
    channel = connection.channel()
    channel.exchange_declare(exchange=exchange, exchange_type="fanout", durable=True)
    channel.confirm_delivery()
    for line in sys.stdin:
        if not line.strip():
            continue
        message = json.loads(line)
        body = json.dumps(envelope(message["event"], message["outbox_id"]))
        try:
            channel.basic_publish(exchange=exchange, routing_key="", body=body.encode(),
                                  properties=properties(message["properties"], json.loads(body)),
                                  mandatory=True)
        except (pika.exceptions.UnroutableError, pika.exceptions.NackError) as e:
            print("plane_publisher: the broker refused %s: %r" % (body, e), file=sys.stderr)
            sys.exit(1)
        print(json.dumps({"properties": message["properties"], "body": body}), flush=True)
    connection.close()


if __name__ == "__main__":
    main()
