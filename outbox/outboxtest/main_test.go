package outboxtest_test

import (
	"os"
	"testing"

	"github.com/warrenmq/warren/internal/testenv"
)

func TestMain(m *testing.M) {
	testenv.ExamplesNeedServices()
	os.Exit(m.Run())
}
