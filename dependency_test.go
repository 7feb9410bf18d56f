package warren_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/warrenmq/warren"
)

// A dependency's error is served by the health endpoints, so its text is
// redacted: a store's error may quote its URL with the password.
func TestDependencyStateRedactsTheError(t *testing.T) {
	d := warren.NewDependency("dedup")
	d.Report(errors.New("dial redis://:r3d1s-pw@cache:6379/0: connection refused"))
	s := d.State()
	if s.Up || strings.Contains(s.Error, "r3d1s-pw") || !strings.Contains(s.Error, "redis://:xxxxx@cache:6379/0") {
		t.Errorf("state %+v, want down with the password masked", s)
	}
}
