package cdc

// Internals for the tests of package cdc_test.
const (
	// SettleQueue is settleQueue, for the kill test's bound on duplicates.
	SettleQueue = settleQueue
	// VisibleSQL is visibleSQL: $1 the 32-bit xids, the count of those a
	// new snapshot would not see.
	VisibleSQL = visibleSQL
)
