// Package deduptest checks that a [dedup.Store] keeps the lease contract:
// a claim is acquired by exactly one of many concurrent claimers, a done key
// stays done for the retention period, a released key is free at once, an
// expired lease is taken over and the old holder can no longer complete it.
//
// A store's test calls [Run] with a constructor:
//
//	func TestConformance(t *testing.T) {
//		deduptest.Run(t, func(t *testing.T, retention time.Duration) dedup.Store {
//			return mystore.New(..., retention)
//		})
//	}
//
// warren runs it against dedup/memory, dedup/postgres and dedup/redis; a
// store of your own passes it with the same call.
package deduptest
