package main

import (
	"os/exec"
	"strings"
	"testing"
)

// The shipped binary links no example code: the demo that wires the
// examples is its own program (docs/adr/002-demo-outside-examples.md).
func TestCommandLinksNoExamples(t *testing.T) {
	out, err := exec.CommandContext(t.Context(), "go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if strings.HasPrefix(pkg, "github.com/warrenmq/warren/examples/") {
			t.Errorf("cmd/warren depends on %s", pkg)
		}
	}
}
