package amqpx_test

import (
	"os"
	"testing"

	"github.com/warrenmq/warren/internal/testenv/localrabbit"
)

// TestMain stops the binary's shared private node once the tests have
// run, so that it shuts down cleanly and leaves no directory behind.
func TestMain(m *testing.M) {
	code := m.Run()
	localrabbit.StopShared()
	os.Exit(code)
}
