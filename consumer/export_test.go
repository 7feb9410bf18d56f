package consumer

import "context"

// SetBeforeConsumeHook makes f run before each consumer channel of a
// session is opened; an error fails that session's start. Set before Run.
func SetBeforeConsumeHook(c *BaseConsumer, f func(channel int) error) { c.beforeConsume = f }

// SetBeforeRedeclareHook makes f run before the topology is declared again
// for a queue found missing. Set before Run.
func SetBeforeRedeclareHook(c *BaseConsumer, f func()) { c.beforeRedeclare = f }

// SetRebalancedHook makes f run with the replica count each time a
// partitioned consumer's rebalancer counted the replicas. Set before Run.
func SetRebalancedHook(c *BaseConsumer, f func(replicas int)) { c.rebalanced = f }

// ProbeBrokerLimit is probeBrokerLimit, for the lane test that sets the
// limit on the binary's shared private node.
func ProbeBrokerLimit(ctx context.Context, url, name string, size int) (limit int64, version string, err error) {
	return probeBrokerLimit(ctx, url, name, size)
}

// VersionDefaultLimit is versionDefaultLimit.
func VersionDefaultLimit(version string) int64 { return versionDefaultLimit(version) }
