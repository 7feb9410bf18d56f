package consumer_test

import (
	"testing"

	"github.com/warrenmq/warren/internal/testenv/localrabbit"
)

// TestSharedNode runs the tests that alarm or reconfigure the binary's
// shared private node one after another, beside the package's other
// tests. One of them alone: go test -run 'TestSharedNode/FailedDeclarationRemovesWhatItCreated'.
func TestSharedNode(t *testing.T) {
	localrabbit.RunLane(t, []localrabbit.LaneTest{
		{Name: "FailedDeclarationRemovesWhatItCreated", Run: testFailedDeclarationRemovesWhatItCreated},
		{Name: "BlockedConnectionIsReported", Run: testBlockedConnectionIsReported},
		{Name: "MemoryBudgetLowersPrefetch", Run: testMemoryBudgetLowersPrefetch},
		{Name: "MemoryBudgetTooSmallRefusesToStart", Run: testMemoryBudgetTooSmallRefusesToStart},
		{Name: "SizeProbeUnderAlarmDoesNotHangStart", Run: testSizeProbeUnderAlarmDoesNotHangStart},
		{Name: "PartitionsWithoutPlugin", Run: testPartitionsWithoutPlugin},
		{Name: "BrokerPermissionsWork", Run: testBrokerPermissionsWork},
		{Name: "RefusedReconnectIsRetried", Run: testRefusedReconnectIsRetried},
	})
}
