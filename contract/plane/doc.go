// Package plane holds the contracts of the events Plane's triggers write,
// and warren's Plane profiles (outbox/capture's PlaneIssues and the
// others) write the same: the Go types of their payload data, for
// warren.Typed handlers, and a contract.Set of them at Plane's envelope
// version, "1.0", for the producer's check, a consumer's
// contract.Middleware and `warren contracts check`.
//
// The contracts take Plane's data as Plane writes it: the row as
// to_jsonb gives it (uuids and timestamps as strings, nullable columns
// null); data as the JSON string "{}" on a delete or a link removed
// (checked as the empty object it holds); null data on a comment of an
// issue that is gone. They require the columns every Plane version since
// work-item types has, and allow the members a version adds (a consumer
// ignores what its type does not have). Only payload.data is covered:
// previous_attributes holds old values as text, as Plane writes them.
//
// Events relayed in warren's own envelope carry the version their outbox
// row has, which capture leaves empty unless its Spec sets Version: set
// it to "1.0" for these contracts to apply, or relay with --format plane,
// whose envelope says 1.0.
package plane
