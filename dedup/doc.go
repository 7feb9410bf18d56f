// Package dedup defines how warren remembers which events a consumer has
// already handled: a [Store] that hands out leases on keys.
//
// A flag set before the handler runs loses the event when the handler then
// fails, and a flag set after it runs lets two workers both run it. A lease
// does neither. [Store.Claim] takes the key for a while and says whether it
// was [Acquired], is [Done] already, or is [Busy] under another claimer's
// unexpired lease. The claimer then calls [Store.Complete] after success, so
// the key stays done for the retention period, or [Store.Release] after
// failure, so the retry runs. A claimer that dies does neither; its lease
// runs out and the next claim takes the key over.
//
// Backends live in sub-packages: dedup/postgres (with a transactional inbox
// mode in which the done-mark commits in the handler's own transaction),
// dedup/redis and dedup/memory. dedup/deduptest checks any Store against
// these rules with one call.
package dedup
