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
		{Name: "ProbeReadsTheBrokersLimit", Run: testProbeReadsTheBrokersLimit},
	})
}

// usersLane is the lane of the tests that add, restrict and lock out
// broker users: they change nothing other tests see, but an alarm of the
// first lane would block them, so they run one after another on a node
// of their own, beside that lane. One of them alone: go test -run
// 'TestSharedUsersNode/RefusedReconnectIsRetried'.
const usersLane = "users"

func TestSharedUsersNode(t *testing.T) {
	localrabbit.RunLane(t, []localrabbit.LaneTest{
		{Name: "BrokerPermissionsWork", Run: testBrokerPermissionsWork},
		{Name: "RefusedReconnectIsRetried", Run: testRefusedReconnectIsRetried},
	})
}
