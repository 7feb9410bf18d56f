package dlqtool_test

import (
	"os"
	"testing"

	"github.com/warrenmq/warren/internal/testenv"
	"github.com/warrenmq/warren/internal/testenv/localrabbit"
)

func TestMain(m *testing.M) {
	testenv.ExamplesNeedServices()
	code := m.Run()
	localrabbit.StopShared() // the private node of a test that needed one
	os.Exit(code)
}
