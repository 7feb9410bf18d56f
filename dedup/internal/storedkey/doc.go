// Package storedkey bounds the size of the dedup keys a store writes. Keys
// are built from event IDs, which come from outside: a producer can send a
// megabyte of ID, and a store that kept it verbatim would hold a megabyte
// per key for the whole retention period (or, in a database, fail to index
// it). Every store that persists keys maps them through this package, so
// they all agree on the rule: a key of at most [MaxLen] bytes is stored as
// itself, a longer one as [Digest] of it.
package storedkey
