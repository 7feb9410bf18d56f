package redact_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/warrenmq/warren/internal/redact"
)

func ExampleValues() {
	fmt.Println(redact.Values("no hook at /services/T0/B0/Zq9xL2 (try /services/T0/B0/Zq9xL2/)", "services", "T0", "Zq9xL2"))
	// Output:
	// no hook at /xxxxx/T0/B0/xxxxx (try /xxxxx/T0/B0/xxxxx/)
}

// A short secret that is part of a long one must not be masked first: that
// would break the long one's occurrences apart and leave its rest in view.
func TestValuesMasksLongerSecretsFirst(t *testing.T) {
	const long = "webhook-key-9f3a2c"
	for _, order := range [][]string{{"hook", long}, {long, "hook"}} {
		got := redact.Values("posted to "+long+" and to hook", order...)
		if strings.Contains(got, "-key-9f3a2c") || strings.Contains(got, "hook") {
			t.Errorf("Values with secrets %q = %q: part of a secret is left", order, got)
		}
	}
	if got := redact.Values("a b ab", "ab", ""); got != "a b ab" {
		t.Errorf("Values masked a secret shorter than three characters: %q", got)
	}
}
