// Package redis is a [dedup.Store] on Redis (go-redis v9; a single node,
// Sentinel or Cluster through redis.UniversalClient).
//
// Each key is one Redis string under a configurable prefix. A claim is SET
// NX PX: the value is the claim's token and the lease is the key's time to
// live, so a dead claimer's lease simply expires. Complete and Release are
// compare-and-set scripts keyed on the token; Complete replaces the token
// by a distinct done value whose time to live is the retention period.
// Every command touches a single key, named in KEYS, and the dedup key sits
// in a hash tag ("<prefix>{<key>}"), so each one runs on the Cluster node
// that owns the key's slot and the slot depends on the key alone. A dedup
// key longer than 512 bytes (event IDs come from outside) is stored as
// "sha256:" and its hex digest, the rule dedup/postgres follows, so no key
// holds more than a bounded name for its retention period.
//
// # Batching
//
// Calls that goroutines make at the same time share round trips: a call
// that finds the store idle goes out at once, and calls that arrive while
// pipelines are in flight go out together in the next one (Config.MaxBatch,
// Config.MaxBatchesInFlight). Each call is still its own atomic script with
// its own reply, so one key's error fails that call alone. A consumer whose
// workers each claim and complete then pays a fraction of a round trip per
// call instead of two round trips per message; docs/adr/016-dedup-batching.md
// has the measurements.
//
// # Durability
//
// The store is exactly as durable as the Redis behind it. A Redis that
// restarts without persistence (or fails over to a replica that had not yet
// received the latest writes) forgets done-marks and leases: events
// delivered again within their retention are handled again, and a handler
// running across the restart finds its lease gone when it completes. No
// event is lost that way — forgetting can only let a handler run again,
// never keep one from running — so what remains after a restart is
// at-least-once delivery. With appendonly yes and appendfsync everysec, at
// most about a second of done-marks is forgotten. For effects that must
// happen exactly once, use dedup/postgres in transactional mode.
package redis
