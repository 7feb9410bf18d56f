package relay_test

import (
	"testing"

	"github.com/warrenmq/warren/internal/testenv/localrabbit"
)

// TestSharedNode runs the tests that alarm or reconfigure the binary's
// shared private node one after another, beside the package's other
// tests. One of them alone: go test -run 'TestSharedNode/BlockedBrokerSpendsNoAttempts'.
func TestSharedNode(t *testing.T) {
	localrabbit.RunLane(t, []localrabbit.LaneTest{
		{Name: "BlockedBrokerSpendsNoAttempts", Run: testBlockedBrokerSpendsNoAttempts},
		{Name: "RefusedReconnectIsRetried", Run: testRefusedReconnectIsRetried},
	})
}
