// Package contract holds the contracts of a stream's events: for each
// event type and version, a JSON Schema (draft 2020-12) of its payload's
// data, derived from a Go type ([Of]) or written by hand, and kept in the
// service's repository as files ([Set.WriteDir], [LoadDir]).
//
// A [Set] checks events against them ([Set.Check]): a producer passes it
// to outbox.Options.Check, so that Publish refuses an event that breaks
// its contract before the transaction commits, and no such event enters
// the stream; a consumer puts [Middleware] in front of its handlers, so
// that an event that breaks its contract is dead-lettered as undecodable
// with the contract and the field that broke it, never handed to a
// handler. A consumer that reads a newer version than some producers write
// declares how the older ones reach it ([Set.Reader], [Reads], [Upcast]).
// [Compare] (and `warren contracts check`) tells whether a change to a set
// keeps a compatibility [Mode], field by field, for CI. Schemas are
// generated with github.com/invopop/jsonschema and checked with
// github.com/santhosh-tekuri/jsonschema/v6. docs/contracts.md walks
// through adding a contract to an existing event type;
// docs/adr/029-event-contracts.md holds the decisions.
//
// A contract covers payload.data only: the envelope's own fields are
// checked by warren.Event.Validate, and payload.previous_attributes is
// whatever the changed fields held before.
package contract
