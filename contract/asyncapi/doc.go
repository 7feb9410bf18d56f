// Package asyncapi writes an AsyncAPI 3.0.0 document of a warren event
// stream: the exchange the relays publish to, each consumer's queue and
// the event types it handles, and each event type's envelope with its
// contract (package contract) as payload.data.
//
// The document is JSON, its members sorted, so that it can be committed
// and a change to the stream shows as a diff. [Document] builds it from a
// [contract.Set] and a [Stream]: what is bound to the exchange and who
// handles what, which `warren contracts asyncapi` reads from --consumer
// flags (CI) or from RabbitMQ's management API (a running deployment).
//
// warren's exchange is a fanout: every queue bound to it receives every
// event, whatever its routing key (the relays publish with the event type
// as the key), and a consumer picks what it handles in process, by
// event-type prefix. So a queue's channel lists every event type that
// reaches it, and the consumer's receive operation only those it handles;
// a queue behind a topic or direct exchange receives those its binding
// keys match.
//
// A contract is JSON Schema 2020-12; AsyncAPI 3.0.0's Schema Object is a
// superset of draft-07. A contract is placed in the document only in
// keywords that mean the same in both: its $refs are rewritten to point
// into the document, a $ref with other keywords beside it becomes an allOf
// (draft-07 ignores a $ref's siblings), and a keyword draft-07 does not
// have ($id below the root, $anchor, $dynamicRef, prefixItems,
// unevaluatedProperties, dependentRequired, …) is an error naming the
// contract and where, never a document that says something else.
// docs/contracts.md describes the command and what would still break it.
package asyncapi
