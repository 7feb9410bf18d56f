package amqpx_test

import (
	"os"
	"testing"

	"github.com/warrenmq/warren/internal/testenv/localrabbit"
)

// TestMain stops the binary's shared private node once the tests have
// run.
func TestMain(m *testing.M) {
	os.Exit(localrabbit.RunTests(m))
}
