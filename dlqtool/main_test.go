package dlqtool_test

import (
	"os"
	"testing"

	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/internal/testenv/localrabbit"
)

func TestMain(m *testing.M) {
	testenv.ExamplesNeedServices()
	os.Exit(localrabbit.RunTests(m))
}
