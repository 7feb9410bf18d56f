package cdc

// Internals for the tests of package cdc_test.
const (
	// SettleQueue is settleQueue, for the kill test's bound on duplicates.
	SettleQueue = settleQueue
)
