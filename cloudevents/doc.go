// Package cloudevents writes and reads warren events as CloudEvents
// (specification v1.0.2) in an AMQP 0-9-1 message, by the CloudEvents
// AMQP protocol binding: binary mode (attributes as headers named
// "cloudEvents:<attribute>", the data content type as the content type,
// the data as the body) and structured mode (the JSON event format as the
// body, content type application/cloudevents+json). The binding is
// written for AMQP 1.0; on RabbitMQ's AMQP 0-9-1 its application
// properties are the message's headers and its content-type property is
// content_type.
//
// [Encoder.Encode] returns the content type, headers and body of a
// message; [Decode] reads them back, in either mode and with either
// header prefix ("cloudEvents:" or "cloudEvents_"), into a warren.Event.
// [IsCloudEvent] tells a consumer which decoder a message needs. Its
// errors are [warren.Undecodable] and wrap [warren.ErrInvalidEvent], so a
// consumer dead-letters a malformed message at once.
//
// # The mapping
//
//	attribute        type                     warren
//	---------------  -----------------------  -------------------------------------------
//	id               String                   ID (event_id); Validate's rules apply
//	source           URI-reference            Encoder.Source; Event.Source when decoded
//	specversion      String                   always "1.0"
//	type             String                   Type (event_type)
//	datacontenttype  String                   always application/json (binary: content_type)
//	dataschema       URI                      not written; Event.DataSchema when decoded
//	subject          String                   EntityID (entity_id), absent when empty
//	time             Timestamp                CreatedAt (created_at), RFC 3339 in UTC with
//	                                          its nanoseconds, absent when zero
//	entitytype       String (extension)       EntityType (entity_type)
//	workspaceid      String (extension)       WorkspaceID (workspace_id)
//	projectid        String (extension)       ProjectID (project_id)
//	initiatorid      String (extension)       InitiatorID (initiator_id)
//	initiatortype    String (extension)       InitiatorType (initiator_type)
//	version          String (extension)       Version (version)
//	any other name   String, Boolean, Integer Extra[name]: an Extra field whose name is a
//	                                          legal attribute name the mapping does not
//	                                          use, and whose value is a string, boolean
//	                                          or 32-bit integer in its canonical JSON
//	warrenextra      String (extension)       the other Extra fields, as a JSON object
//	data             (the body in binary)     Payload, the whole object: data,
//	                                          previous_attributes and its other members
//
// warren's extension attributes are the envelope's field names without
// their underscores, as the specification's naming rule (lower-case ASCII
// letters and digits) demands; each is absent when the field is empty,
// which warren reads as empty. The event's data is warren's payload
// object, not payload.data: previous_attributes is an object (on a
// Plane delete, the whole old row), which no extension attribute can hold
// (their types are scalars, and in binary mode they are headers, bounded
// by the frame size), and a payload may have members of its own.
//
// Decoding is the mapping backwards. An extension attribute the mapping
// does not name becomes an Extra field of its name (a Timestamp or
// Binary header as the string of its canonical form), and warrenextra's
// members Extra fields of theirs. An event encoded and decoded again is
// the event warren's own envelope would give back, field for field, in
// both modes (a time in UTC, Extra fields named like envelope fields
// dropped), Plane's envelopes included.
//
// docs/cloudevents.md has the mapping's reasons, the wiring into the
// relay and the consumer, and what the codec refuses or cannot do.
package cloudevents
