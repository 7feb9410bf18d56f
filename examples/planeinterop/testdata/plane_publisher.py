"""Publish outbox rows the way Plane's outbox poller does.

Usage: plane_publisher.py AMQP_URL EXCHANGE < messages.jsonl

What Plane puts on the wire is read from Plane's source (makeplane/plane,
apps/api/plane/event_stream/: publisher.py, models/outbox.py's
OutboxEvent.to_publisher_format, management/commands/outbox_poller.py),
not guessed:

  properties  delivery_mode=2, content_type="application/json",
              content_encoding="utf-8", timestamp=int(time.time()); no
              message_id, no type, no headers
  body        json.dumps(..., default=str) (", " and ": " separators,
              non-ASCII escaped) of, in this key order: "timestamp"
              (int(time.time()), the publish time), "publisher":
              "plane-event-stream", "publisher_instance": "poller-<pid>",
              "version": "1.0", "source": "outbox-poller", "outbox_id"
              (the row's id), then the row's event_id, event_type,
              entity_type, entity_id, payload, workspace_id,
              project_id (null when NULL), initiator_id, initiator_type,
              the ids through str().
              initiator_id is str() of the column even when it is NULL, so
              a NULL initiator is the STRING "None", not null: Plane's bug,
              which its consumers must live with.

Each input line is an object {"properties": KIND, "outbox_id": N, "event": ROW}:
ROW holds the outbox row's event columns as JSON (null for NULL), N its id.
A column missing from ROW is left out of the body: no Plane row lacks one
(they are NOT NULL or nullable columns), so that stands for a broken
producer. The script declares EXCHANGE as Plane does, a durable fanout
(Plane's is plane.event_stream), and publishes the body with the
properties KIND names:

  plane  Plane's, exactly as above
  full   what warren's relay sets: delivery_mode=2,
         content_type="application/json", message_id (= event_id), type
         (= event_type), timestamp and the x-warren-initiator-type and
         x-warren-entity-id headers (the latest "" when the event has no
         entity_id)
  none   no BasicProperties at all: no content type, no message id, no
         type, not persistent

The body is Plane's in every kind. For every message published it prints
one line, {"properties": KIND, "body": BODY}, BODY being the exact text
published, so the caller can compare what its consumers received byte for
byte. Exits 1 with the reason on the first message the broker refuses.

Unlike Plane's publisher (mandatory=False, no publisher confirms), this one
publishes mandatory with confirms, so that a message no queue takes fails
the caller's test instead of vanishing. That changes nothing in the message.
"""

import json
import os
import sys
import time

import pika

# The row's columns, in the order Plane's publisher writes them after its
# own fields.
ROW_COLUMNS = ("event_id", "event_type", "entity_type", "entity_id", "payload",
               "workspace_id", "project_id", "initiator_id", "initiator_type")


def plane_body(row, outbox_id, now):
    body = {
        "timestamp": now,
        "publisher": "plane-event-stream",
        "publisher_instance": "poller-%d" % os.getpid(),
        "version": "1.0",
        "source": "outbox-poller",
        "outbox_id": outbox_id,
    }
    for column in ROW_COLUMNS:
        if column in row:
            body[column] = row[column]
    # OutboxEvent.to_publisher_format: ids through str(), project_id only
    # when set, initiator_id always, so a NULL one becomes "None".
    for column in ("event_id", "entity_id", "workspace_id", "initiator_id"):
        if column in body:
            body[column] = str(body[column])
    if "project_id" in body:
        body["project_id"] = str(body["project_id"]) if body["project_id"] else None
    return body


def properties(kind, body, now):
    if kind == "none":
        return None
    if kind == "plane":
        return pika.BasicProperties(delivery_mode=2, content_type="application/json",
                                    content_encoding="utf-8", timestamp=now)
    if kind == "full":
        return pika.BasicProperties(delivery_mode=2, content_type="application/json",
                                    message_id=body.get("event_id"), type=body.get("event_type"),
                                    timestamp=now,
                                    headers={"x-warren-initiator-type": body.get("initiator_type"),
                                             "x-warren-entity-id": body.get("entity_id") or ""})
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
        # Plane reads the clock twice: for the body, then for the property.
        fields = plane_body(message["event"], message["outbox_id"], int(time.time()))
        body = json.dumps(fields, default=str)
        try:
            channel.basic_publish(exchange=exchange, routing_key="", body=body.encode("utf-8"),
                                  properties=properties(message["properties"], fields, int(time.time())),
                                  mandatory=True)
        except (pika.exceptions.UnroutableError, pika.exceptions.NackError) as e:
            print("plane_publisher: the broker refused %s: %r" % (body, e), file=sys.stderr)
            sys.exit(1)
        print(json.dumps({"properties": message["properties"], "body": body}), flush=True)
    connection.close()


if __name__ == "__main__":
    main()
