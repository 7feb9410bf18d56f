package dedup

// Batching is how a networked store coalesces calls (claims, completions,
// releases) from concurrent goroutines into batches. The stores that batch
// (dedup/postgres, dedup/redis) embed it in their Config and document
// their own defaults and bounds; the zero value takes those defaults.
type Batching struct {
	// MaxBatch is how many calls one batch may carry. Calls that arrive
	// while batches are in flight wait and go out together in the next
	// one, sharing a round trip; a call that finds the store idle goes out
	// at once, alone. 1 turns batching off: every call is sent at once on
	// its own, as many at a time as the store's connection pool allows.
	MaxBatch int

	// MaxBatchesInFlight is how many batches may be in flight at once;
	// unused when MaxBatch is 1.
	MaxBatchesInFlight int
}
